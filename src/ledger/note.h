// Signed notes and checkpoints, as C2SP specifies them (signed-note.md,
// tlog-checkpoint.md), so that tools written for Go's sumdb and for the
// transparency-dev ecosystem read and check our ledger's checkpoints.
//
//   <text, ending in a newline>
//   <blank line>
//   — <key name> <base64(4-byte key hash || 64-byte Ed25519 signature)>
//
// The key hash is the first four bytes (big-endian) of SHA-256(name || "\n"
// || 0x01 || public key). A verifier key reads "name+hash8hex+base64(0x01 ||
// public key)". A checkpoint's text is three lines: origin, decimal tree
// size, base64 root hash (further lines, extensions, are kept and ignored).
//
// Pure: no I/O. Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ledger/merkle.h"

namespace claw::ledger {

uint32_t KeyHash(std::string_view name, std::string_view public_key);

struct NoteVerifier {
  std::string name;
  uint32_t hash = 0;
  std::string public_key;  // 32 bytes
};

// "name+hash8hex+base64(0x01 || public key)". InvalidArgument for a bad name
// (empty, or holding '+' or a space) or a public key that is not 32 bytes.
Result<std::string> FormatVerifierKey(std::string_view name, std::string_view public_key);
// InvalidArgument naming what is wrong: a part missing, a name with a space
// or '+', a hash that does not match the key, an algorithm other than Ed25519.
Result<NoteVerifier> ParseVerifierKey(std::string_view vkey);

// A signing key as Go's golang.org/x/mod/sumdb/note writes it:
// "PRIVATE+KEY+name+hash8hex+base64(0x01 || 32-byte Ed25519 seed)". The
// secret key is libsodium's 64-byte form (seed || public key).
struct NoteSigner {
  std::string name;
  std::string secret_key;
};
Result<std::string> FormatSignerKey(std::string_view name, std::string_view secret_key);
// InvalidArgument naming what is wrong, as ParseVerifierKey.
Result<NoteSigner> ParseSignerKey(std::string_view skey);

// Signs `text` (UTF-8, ending in a newline, no control characters besides
// newlines) as `name` with a 64-byte libsodium Ed25519 secret key.
Result<std::string> SignNote(std::string_view text, std::string_view name,
                             std::string_view secret_key);

// The text of `note` if one of its signatures is `verifier`'s and valid.
// InvalidArgument for a malformed note; PermissionDenied when no signature
// line is by that key, or the one that is does not verify.
Result<std::string> OpenNote(std::string_view note, const NoteVerifier& verifier);

struct Checkpoint {
  std::string origin;
  uint64_t size = 0;
  Hash root{};
};

std::string FormatCheckpoint(const Checkpoint& c);
// InvalidArgument naming the line that is wrong.
Result<Checkpoint> ParseCheckpoint(std::string_view text);

std::string Base64(std::string_view bytes);
// InvalidArgument unless `text` is standard, padded base64.
Result<std::string> FromBase64(std::string_view text);

}  // namespace claw::ledger
