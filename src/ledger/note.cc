#include "ledger/note.h"

#include <sodium.h>

#include <charconv>
#include <cstring>

#include "common/crypto.h"

namespace claw::ledger {
namespace {

constexpr unsigned char kAlgEd25519 = 0x01;
constexpr std::string_view kDash = "\xE2\x80\x94 ";  // U+2014 EM DASH, then a space
constexpr size_t kMaxSignatures = 100;

Status CheckName(std::string_view name) {
  if (name.empty()) return InvalidArgument("a key name is empty");
  for (unsigned char c : name) {
    if (c == '+' || c <= ' ' || c == 0x7f) {
      return InvalidArgument("key name '" + std::string(name) +
                             "' holds a '+', a space or a control character");
    }
  }
  return Status::Ok();
}

// Text of a note: valid UTF-8 (libsodium has no validator; we accept the
// bytes the spec allows: no control characters other than newline, and
// multi-byte sequences whose continuation bytes are well-formed).
Status CheckText(std::string_view text) {
  if (text.empty() || text.back() != '\n') return InvalidArgument("a note's text must end in a newline");
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n') || c == 0x7f) {
        return InvalidArgument("a note's text holds a control character at byte " +
                               std::to_string(i));
      }
      ++i;
      continue;
    }
    const size_t len = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (len == 0 || (c >= 0xF5) || i + len > text.size()) {
      return InvalidArgument("a note's text is not UTF-8 at byte " + std::to_string(i));
    }
    for (size_t j = 1; j < len; ++j) {
      if ((static_cast<unsigned char>(text[i + j]) & 0xC0) != 0x80) {
        return InvalidArgument("a note's text is not UTF-8 at byte " + std::to_string(i));
      }
    }
    i += len;
  }
  return Status::Ok();
}

uint32_t ReadBigEndian32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

std::string Hex8(uint32_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) out[i] = kDigits[v & 0xf];
  return out;
}

}  // namespace

std::string Base64(std::string_view bytes) {
  InitCrypto();
  std::string out(sodium_base64_encoded_len(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.pop_back();  // the terminating NUL
  return out;
}

Result<std::string> FromBase64(std::string_view text) {
  InitCrypto();
  std::string out(text.size() / 4 * 3 + 3, '\0');
  size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), nullptr, &len, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
      end != text.data() + text.size()) {
    return InvalidArgument("not base64: '" + std::string(text.substr(0, 64)) + "'");
  }
  out.resize(len);
  return out;
}

uint32_t KeyHash(std::string_view name, std::string_view public_key) {
  std::string data(name);
  data += '\n';
  data += static_cast<char>(kAlgEd25519);
  data += public_key;
  const Hash h = Sha256(data);
  return ReadBigEndian32(h.data());
}

Result<std::string> FormatVerifierKey(std::string_view name, std::string_view public_key) {
  if (Status s = CheckName(name); !s.ok()) return s;
  if (public_key.size() != crypto_sign_PUBLICKEYBYTES) {
    return InvalidArgument("an Ed25519 public key is 32 bytes");
  }
  std::string key(1, static_cast<char>(kAlgEd25519));
  key += public_key;
  return std::string(name) + "+" + Hex8(KeyHash(name, public_key)) + "+" + Base64(key);
}

Result<NoteVerifier> ParseVerifierKey(std::string_view vkey) {
  const size_t p1 = vkey.find('+');
  const size_t p2 = p1 == std::string_view::npos ? p1 : vkey.find('+', p1 + 1);
  if (p2 == std::string_view::npos) {
    return InvalidArgument("a verifier key reads name+hash+key, got '" +
                           std::string(vkey.substr(0, 80)) + "'");
  }
  NoteVerifier v;
  v.name = std::string(vkey.substr(0, p1));
  if (Status s = CheckName(v.name); !s.ok()) return s;
  const std::string_view hash_hex = vkey.substr(p1 + 1, p2 - p1 - 1);
  uint32_t hash = 0;
  auto [ptr, ec] = std::from_chars(hash_hex.data(), hash_hex.data() + hash_hex.size(), hash, 16);
  if (hash_hex.size() != 8 || ec != std::errc() || ptr != hash_hex.data() + hash_hex.size()) {
    return InvalidArgument("a verifier key's hash is 8 hex digits, got '" +
                           std::string(hash_hex) + "'");
  }
  auto key = FromBase64(vkey.substr(p2 + 1));
  if (!key.ok()) return InvalidArgument("verifier key: " + key.status().message());
  if (key->size() != 1 + crypto_sign_PUBLICKEYBYTES || (*key)[0] != static_cast<char>(kAlgEd25519)) {
    return InvalidArgument("verifier key is not an Ed25519 key (algorithm byte 0x01, 32 bytes)");
  }
  v.public_key = key->substr(1);
  v.hash = KeyHash(v.name, v.public_key);
  if (v.hash != hash) return InvalidArgument("verifier key's hash does not match its name and key");
  return v;
}

Result<std::string> FormatSignerKey(std::string_view name, std::string_view secret_key) {
  if (Status s = CheckName(name); !s.ok()) return s;
  if (secret_key.size() != crypto_sign_SECRETKEYBYTES) {
    return InvalidArgument("an Ed25519 secret key is 64 bytes");
  }
  std::string key(1, static_cast<char>(kAlgEd25519));
  key += secret_key.substr(0, crypto_sign_SEEDBYTES);
  return "PRIVATE+KEY+" + std::string(name) + "+" +
         Hex8(KeyHash(name, secret_key.substr(crypto_sign_SEEDBYTES))) + "+" + Base64(key);
}

Result<NoteSigner> ParseSignerKey(std::string_view skey) {
  constexpr std::string_view kPrefix = "PRIVATE+KEY+";
  if (!skey.starts_with(kPrefix)) {
    return InvalidArgument("a signer key starts with PRIVATE+KEY+");
  }
  skey.remove_prefix(kPrefix.size());
  const size_t p1 = skey.find('+');
  const size_t p2 = p1 == std::string_view::npos ? p1 : skey.find('+', p1 + 1);
  if (p2 == std::string_view::npos) {
    return InvalidArgument("a signer key reads PRIVATE+KEY+name+hash+key");
  }
  NoteSigner signer;
  signer.name = std::string(skey.substr(0, p1));
  if (Status s = CheckName(signer.name); !s.ok()) return s;
  auto key = FromBase64(skey.substr(p2 + 1));
  if (!key.ok() || key->size() != 1 + crypto_sign_SEEDBYTES ||
      (*key)[0] != static_cast<char>(kAlgEd25519)) {
    return InvalidArgument("signer key is not an Ed25519 seed (algorithm byte 0x01, 32 bytes)");
  }
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  signer.secret_key.resize(crypto_sign_SECRETKEYBYTES);
  crypto_sign_seed_keypair(pk, reinterpret_cast<unsigned char*>(signer.secret_key.data()),
                           reinterpret_cast<const unsigned char*>(key->data() + 1));
  const std::string_view public_key(reinterpret_cast<const char*>(pk), sizeof pk);
  if (Hex8(KeyHash(signer.name, public_key)) != skey.substr(p1 + 1, p2 - p1 - 1)) {
    return InvalidArgument("signer key's hash does not match its name and key");
  }
  return signer;
}

Result<std::string> SignNote(std::string_view text, std::string_view name,
                             std::string_view secret_key) {
  if (Status s = CheckText(text); !s.ok()) return s;
  if (Status s = CheckName(name); !s.ok()) return s;
  if (secret_key.size() != crypto_sign_SECRETKEYBYTES) {
    return InvalidArgument("an Ed25519 secret key is 64 bytes");
  }
  const std::string_view public_key = secret_key.substr(32);
  const uint32_t hash = KeyHash(name, public_key);
  std::string sig;
  sig.push_back(static_cast<char>(hash >> 24));
  sig.push_back(static_cast<char>(hash >> 16));
  sig.push_back(static_cast<char>(hash >> 8));
  sig.push_back(static_cast<char>(hash));
  sig += Sign(text, std::string(secret_key));
  std::string note(text);
  note += '\n';
  note += kDash;
  note += name;
  note += ' ';
  note += Base64(sig);
  note += '\n';
  return note;
}

Result<std::string> OpenNote(std::string_view note, const NoteVerifier& verifier) {
  const size_t split = note.rfind("\n\n");
  if (split == std::string_view::npos) {
    return InvalidArgument("a signed note has a blank line between its text and its signatures");
  }
  const std::string_view text = note.substr(0, split + 1);
  if (Status s = CheckText(text); !s.ok()) return s;
  std::string_view sigs = note.substr(split + 2);
  if (sigs.empty() || sigs.back() != '\n') {
    return InvalidArgument("a signed note ends with a newline after its signatures");
  }
  // Every line must be well-formed, whoever signed it, before any is used.
  struct Line {
    std::string_view name;
    std::string sig;
  };
  std::vector<Line> lines;
  while (!sigs.empty()) {
    const size_t eol = sigs.find('\n');
    std::string_view line = sigs.substr(0, eol);
    sigs.remove_prefix(eol + 1);
    if (lines.size() == kMaxSignatures) return InvalidArgument("a signed note has too many signatures");
    if (!line.starts_with(kDash)) {
      return InvalidArgument("a signature line starts with an em dash and a space");
    }
    line.remove_prefix(kDash.size());
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) {
      return InvalidArgument("a signature line reads '— name signature'");
    }
    const std::string_view name = line.substr(0, space);
    if (Status s = CheckName(name); !s.ok()) return s;
    auto sig = FromBase64(line.substr(space + 1));
    if (!sig.ok() || sig->size() < 5) {
      return InvalidArgument("signature by '" + std::string(name) +
                             "' is not base64 of a key hash and a signature");
    }
    lines.push_back(Line{name, std::move(sig).value()});
  }
  bool seen_name = false;
  for (const Line& l : lines) {
    if (l.name != verifier.name) continue;  // unknown keys are ignored
    seen_name = true;
    if (ReadBigEndian32(reinterpret_cast<const unsigned char*>(l.sig.data())) != verifier.hash) {
      continue;  // another key of the same name
    }
    if (l.sig.size() != 4 + crypto_sign_BYTES ||
        !Verify(text, std::string_view(l.sig).substr(4), verifier.public_key)) {
      return PermissionDenied("the signature by '" + verifier.name + "' does not verify");
    }
    return std::string(text);
  }
  return PermissionDenied(seen_name ? "no signature by the verifier key '" + verifier.name +
                                          "' (same name, another key)"
                                    : "no signature by '" + verifier.name + "'");
}

std::string FormatCheckpoint(const Checkpoint& c) {
  return c.origin + "\n" + std::to_string(c.size) + "\n" + Base64(AsBytes(c.root)) + "\n";
}

Result<Checkpoint> ParseCheckpoint(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    if (eol == std::string_view::npos) return InvalidArgument("a checkpoint ends in a newline");
    lines.push_back(text.substr(0, eol));
    text.remove_prefix(eol + 1);
  }
  if (lines.size() < 3) return InvalidArgument("a checkpoint has an origin, a size and a root hash");
  Checkpoint c;
  if (lines[0].empty()) return InvalidArgument("checkpoint line 1: the origin is empty");
  c.origin = std::string(lines[0]);
  const std::string_view size = lines[1];
  auto [ptr, ec] = std::from_chars(size.data(), size.data() + size.size(), c.size);
  if (size.empty() || ec != std::errc() || ptr != size.data() + size.size() ||
      (size.size() > 1 && size[0] == '0')) {
    return InvalidArgument("checkpoint line 2: '" + std::string(size.substr(0, 40)) +
                           "' is not a tree size");
  }
  auto root = FromBase64(lines[2]);
  if (!root.ok()) return InvalidArgument("checkpoint line 3: " + root.status().message());
  auto hash = HashFromBytes(*root);
  if (!hash.ok()) return InvalidArgument("checkpoint line 3: " + hash.status().message());
  c.root = *hash;
  return c;
}

}  // namespace claw::ledger
