// Hashing, random tokens and Ed25519 signatures, all through libsodium.
//
// Every function is thread-safe once InitCrypto() has run (it is idempotent
// and cheap; each function calls it). Keys are raw bytes in std::string.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace claw {

void InitCrypto();

// BLAKE2b-256 of `data`, as 64 lowercase hex characters.
std::string Blake2bHex(std::string_view data);

// An incremental BLAKE2b-256 over a sequence of fields. Each field is
// length-prefixed, so ("ab","c") and ("a","bc") hash differently.
class FieldHasher {
 public:
  FieldHasher();
  FieldHasher& Add(std::string_view field);
  FieldHasher& Add(uint64_t value);
  std::string Finish();  // 32 raw bytes

 private:
  alignas(64) unsigned char state_[384];  // crypto_generichash_state
};

// `n` random bytes from the OS CSPRNG, hex-encoded (2n characters).
std::string RandomHex(size_t n);

std::string ToHex(std::string_view bytes);
// InvalidArgument unless `hex` is an even number of hex digits.
Result<std::string> FromHex(std::string_view hex);

struct KeyPair {
  std::string public_key;  // 32 bytes
  std::string secret_key;  // 64 bytes
};

KeyPair GenerateSigningKey();
// Detached Ed25519 signature (64 bytes) of `message`.
std::string Sign(std::string_view message, const std::string& secret_key);
// True only for a well-formed 32-byte key and a valid 64-byte signature.
bool Verify(std::string_view message, std::string_view signature, std::string_view public_key);

// Constant-time comparison, for tokens.
bool EqualConstantTime(std::string_view a, std::string_view b);

}  // namespace claw
