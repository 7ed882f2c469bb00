// The Ledger page: the latest signed checkpoint, and in-browser checks of an
// entry's inclusion proof (RFC 9162 2.1.3.2) and of the checkpoint's Ed25519
// signature (C2SP signed note, Go's sumdb/note verifier key format).

import {h, fmtInt, errorMessage} from './util.js';

const enc = new TextEncoder();
const SIG_PREFIX = '\u2014 ';  // an em dash and a space

function b64(text) {
  const bin = atob(text.trim());
  return Uint8Array.from(bin, c => c.charCodeAt(0));
}

const hex = bytes => Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

async function sha256(...parts) {
  if (!globalThis.crypto || !crypto.subtle) throw new Error('WebCrypto is not available (the page must be served over HTTPS or from localhost)');
  const buf = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) { buf.set(p, o); o += p.length; }
  return new Uint8Array(await crypto.subtle.digest('SHA-256', buf));
}

const LEAF = Uint8Array.of(0), NODE = Uint8Array.of(1);

// A checkpoint note: {body, origin, size, root, sigs: [{name, hash, sig}]}.
export function parseCheckpoint(text) {
  const blank = text.indexOf('\n\n');
  if (blank < 0) throw new Error('the checkpoint has no blank line before its signatures');
  const body = text.slice(0, blank + 1);
  const lines = body.slice(0, -1).split('\n');
  if (lines.length < 3) throw new Error('the checkpoint has fewer than 3 lines (origin, size, root)');
  if (!/^[0-9]+$/.test(lines[1])) throw new Error(`the checkpoint's size is not a number: ${lines[1]}`);
  let root;
  try { root = b64(lines[2]); } catch (e) { throw new Error('the checkpoint\'s root hash is not base64'); }
  if (root.length !== 32) throw new Error(`the checkpoint's root hash has ${root.length} bytes, not 32`);
  const sigs = [];
  for (const line of text.slice(blank + 2).split('\n')) {
    if (!line) continue;
    if (!line.startsWith(SIG_PREFIX)) throw new Error(`a signature line does not start with an em dash: ${line.slice(0, 40)}`);
    const rest = line.slice(SIG_PREFIX.length);
    const sp = rest.indexOf(' ');
    if (sp <= 0) throw new Error('a signature line without a name');
    let raw;
    try { raw = b64(rest.slice(sp + 1)); } catch (e) { throw new Error('a signature that is not base64'); }
    if (raw.length < 5) throw new Error('a signature too short');
    sigs.push({name: rest.slice(0, sp), hash: raw.slice(0, 4), sig: raw.slice(4)});
  }
  return {body, origin: lines[0], size: Number(lines[1]), root, sigs};
}

// "name+hexhash8+base64(0x01 || 32-byte Ed25519 public key)"
export function parseVerifierKey(text) {
  const v = text.trim();
  const a = v.indexOf('+');
  const b = a < 0 ? -1 : v.indexOf('+', a + 1);
  if (a <= 0 || b < 0) throw new Error('the verifier key is not name+hash+key');
  const name = v.slice(0, a), hashHex = v.slice(a + 1, b).toLowerCase();
  if (!/^[0-9a-f]{8}$/i.test(hashHex)) throw new Error('the verifier key\'s hash is not 8 hex digits');
  let key;
  try { key = b64(v.slice(b + 1)); } catch (e) { throw new Error('the verifier key is not base64'); }
  if (key.length !== 33 || key[0] !== 1) throw new Error('the verifier key is not an Ed25519 key (0x01 and 32 bytes)');
  return {name, hashHex, key};
}

// {ok, checked, why}: checked is false when this browser cannot verify Ed25519.
export async function verifySignature(note, vkeyText) {
  const k = parseVerifierKey(vkeyText);
  const sig = note.sigs.find(x => x.name === k.name && hex(x.hash) === k.hashHex);
  if (!sig) return {ok: false, why: `no signature by ${k.name}+${k.hashHex} on the checkpoint`};
  const kh = (await sha256(enc.encode(k.name + '\n'), k.key)).slice(0, 4);
  if (hex(kh) !== k.hashHex) return {ok: false, why: `the verifier key's hash ${k.hashHex} is not its key's (${hex(kh)})`};
  if (sig.sig.length !== 64) return {ok: false, why: `the signature has ${sig.sig.length} bytes, not 64`};
  let pub;
  try {
    pub = await crypto.subtle.importKey('raw', k.key.slice(1), {name: 'Ed25519'}, false, ['verify']);
  } catch (e) {
    return {ok: true, checked: false, name: k.name, why: 'this browser\'s WebCrypto has no Ed25519'};
  }
  const good = await crypto.subtle.verify({name: 'Ed25519'}, pub, sig.sig, enc.encode(note.body));
  return good ? {ok: true, checked: true, name: k.name}
    : {ok: false, why: `the checkpoint's signature by ${k.name} does not verify`};
}

// RFC 9162 2.1.3.2: does `path` prove the leaf hash at `index` is in the tree
// of `size` with `root`?
export async function checkInclusion(index, size, leafHash, path, root) {
  if (index >= size) return `entry ${index} is past the end of the tree of ${size}`;
  let fn = index, sn = size - 1, r = leafHash;
  const odd = n => n % 2 === 1, half = n => Math.floor(n / 2);
  for (const p of path) {
    if (sn === 0) return 'the proof is longer than the tree is deep';
    if (odd(fn) || fn === sn) {
      r = await sha256(NODE, p, r);
      if (!odd(fn)) while (!odd(fn) && fn !== 0) { fn = half(fn); sn = half(sn); }
    } else {
      r = await sha256(NODE, r, p);
    }
    fn = half(fn);
    sn = half(sn);
  }
  if (sn !== 0) return 'the proof is shorter than the tree is deep';
  if (!same(r, root)) return `the proof leads to root ${hex(r).slice(0, 16)}…, not the checkpoint's ${hex(root).slice(0, 16)}…`;
  return '';
}

async function getJson(url) {
  const res = await fetch(url, {cache: 'no-store'});
  if (!res.ok) throw new Error(`${url}: ${await errorMessage(res)}`);
  return res.json();
}

async function getText(url) {
  const res = await fetch(url, {cache: 'no-store'});
  if (!res.ok) throw new Error(`${url}: ${await errorMessage(res)}`);
  return res.text();
}

// {ok, message, entry}: message starts with "verified" or "FAILED: ".
export async function verifyEntry(index, vkeyText) {
  let entry = null;
  try {
    const vkey = vkeyText || await getText('/ledger/key');
    const note = parseCheckpoint(await getText('/ledger/checkpoint'));
    const sig = await verifySignature(note, vkey);
    if (!sig.ok) return {ok: false, message: 'FAILED: ' + sig.why};
    if (index >= note.size) return {ok: false, message: `FAILED: entry ${index} is not in the tree of ${note.size}`};
    const got = await getJson(`/ledger/entries?start=${index}&end=${index + 1}`);
    entry = (got.entries || []).find(e => e.index === index);
    if (!entry || typeof entry.data !== 'string') return {ok: false, message: `FAILED: the ledger did not send entry ${index}`};
    const proof = await getJson(`/ledger/proof/inclusion?index=${index}&size=${note.size}`);
    const path = (proof.hashes || []).map(b64);
    if (path.some(p => p.length !== 32)) return {ok: false, entry, message: 'FAILED: a proof hash is not 32 bytes'};
    const leaf = await sha256(LEAF, enc.encode(entry.data));
    const why = await checkInclusion(index, note.size, leaf, path, note.root);
    if (why) return {ok: false, entry, message: 'FAILED: ' + why};
    const signed = sig.checked ? `whose root is signed by ${sig.name}`
      : `whose root the coordinator serves (its signature was not checked: ${sig.why})`;
    return {ok: true, entry, message: `verified: entry ${index} is in the tree of ${note.size} ${signed}`};
  } catch (e) {
    return {ok: false, entry, message: 'FAILED: ' + e.message};
  }
}

export function mountLedger(root) {
  const cp = h('pre', {id: 'checkpoint', class: 'checkpoint'}, 'loading…');
  const size = h('span', {id: 'ledger-size'}, '…');
  const key = h('code', {id: 'ledger-key', class: 'key'}, '…');
  const sigResult = h('p', {id: 'signature-result', class: 'muted'});
  const input = h('input', {id: 'entry-index', type: 'number', min: 0, step: 1, value: 0});
  const button = h('button', {type: 'submit', id: 'check-inclusion'}, 'Check inclusion');
  const result = h('p', {id: 'proof-result', class: 'proof-result', 'aria-live': 'polite'});
  const entryPre = h('pre', {id: 'entry-json', class: 'json', hidden: true});
  const form = h('form', {id: 'inclusion-form', class: 'inline-form', novalidate: true},
    h('label', {for: 'entry-index'}, 'entry index '), input, ' ', button);
  root.append(h('h2', {}, 'Ledger'),
    h('p', {}, 'Every credit grant and every closed training round is an entry in an append-only Merkle tree ' +
      '(RFC 9162); the coordinator signs its checkpoints. This page checks them here, in your browser.'),
    h('div', {class: 'cards'},
      h('div', {class: 'card'}, h('div', {class: 'label'}, 'entries'), h('div', {class: 'value'}, size)),
      h('div', {class: 'card wide'}, h('div', {class: 'label'}, 'verifier key'), key)),
    h('h3', {}, 'Latest checkpoint'), cp, sigResult,
    h('h3', {}, 'Check an entry'), form, result, entryPre);

  let state = null, checkedText = '';
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    const i = Number(input.value);
    if (!Number.isInteger(i) || i < 0) {
      result.textContent = 'FAILED: the entry index must be a whole number, 0 or more';
      result.className = 'proof-result bad';
      return;
    }
    button.disabled = true;
    result.textContent = `checking entry ${i}…`;
    result.className = 'proof-result';
    const r = await verifyEntry(i, state && state.key);
    button.disabled = false;
    result.textContent = r.message;
    result.className = 'proof-result ' + (r.ok ? 'good' : 'bad');
    entryPre.hidden = !r.entry;
    if (r.entry) {
      let text = r.entry.data;
      try { text = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* show it as it is */ }
      entryPre.textContent = text;
    }
  });

  async function checkSignature(text, vkey) {
    try {
      const r = await verifySignature(parseCheckpoint(text), vkey);
      if (text !== checkedText) return;  // a newer checkpoint came meanwhile
      sigResult.textContent = !r.ok ? 'signature FAILED: ' + r.why
        : r.checked ? `signature verified: signed by ${r.name}` : `signature not checked: ${r.why}`;
      sigResult.className = r.ok ? (r.checked ? 'good' : 'muted') : 'bad';
    } catch (e) {
      sigResult.textContent = 'signature FAILED: ' + e.message;
      sigResult.className = 'bad';
    }
  }

  function update(st) {
    state = st;
    cp.textContent = st.checkpoint || '(no checkpoint yet)';
    size.textContent = fmtInt(st.size);
    key.textContent = st.key || '';
    if (typeof st.size === 'number') input.max = Math.max(0, st.size - 1);
    if (st.checkpoint && st.key && st.checkpoint !== checkedText) {
      checkedText = st.checkpoint;
      checkSignature(st.checkpoint, st.key);
    }
  }
  return {update, destroy() {}};
}
