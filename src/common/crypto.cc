#include "common/crypto.h"

#include <sodium.h>

#include <cstdlib>
#include <mutex>

namespace claw {

void InitCrypto() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (sodium_init() < 0) std::abort();  // no CSPRNG: nothing safe can run
  });
}

std::string ToHex(std::string_view bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                 bytes.size());
  out.pop_back();
  return out;
}

Result<std::string> FromHex(std::string_view hex) {
  InitCrypto();
  std::string out(hex.size() / 2, '\0');
  size_t len = 0;
  if (hex.size() % 2 != 0 ||
      sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), hex.data(),
                     hex.size(), nullptr, &len, nullptr) != 0 ||
      len != out.size()) {
    return InvalidArgument("not a hex string");
  }
  return out;
}

std::string Blake2bHex(std::string_view data) {
  InitCrypto();
  unsigned char h[32];
  crypto_generichash(h, sizeof h, reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                     nullptr, 0);
  return ToHex(std::string_view(reinterpret_cast<const char*>(h), sizeof h));
}

static_assert(sizeof(crypto_generichash_state) <= 384);

FieldHasher::FieldHasher() {
  InitCrypto();
  crypto_generichash_init(reinterpret_cast<crypto_generichash_state*>(state_), nullptr, 0, 32);
}

FieldHasher& FieldHasher::Add(uint64_t value) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(value >> (8 * i));
  crypto_generichash_update(reinterpret_cast<crypto_generichash_state*>(state_), le, sizeof le);
  return *this;
}

FieldHasher& FieldHasher::Add(std::string_view field) {
  Add(uint64_t{field.size()});
  crypto_generichash_update(reinterpret_cast<crypto_generichash_state*>(state_),
                            reinterpret_cast<const unsigned char*>(field.data()), field.size());
  return *this;
}

std::string FieldHasher::Finish() {
  std::string out(32, '\0');
  crypto_generichash_final(reinterpret_cast<crypto_generichash_state*>(state_),
                           reinterpret_cast<unsigned char*>(out.data()), out.size());
  return out;
}

std::string RandomHex(size_t n) {
  InitCrypto();
  std::string bytes(n, '\0');
  randombytes_buf(bytes.data(), n);
  return ToHex(bytes);
}

KeyPair GenerateSigningKey() {
  InitCrypto();
  KeyPair kp;
  kp.public_key.resize(crypto_sign_PUBLICKEYBYTES);
  kp.secret_key.resize(crypto_sign_SECRETKEYBYTES);
  crypto_sign_keypair(reinterpret_cast<unsigned char*>(kp.public_key.data()),
                      reinterpret_cast<unsigned char*>(kp.secret_key.data()));
  return kp;
}

std::string Sign(std::string_view message, const std::string& secret_key) {
  InitCrypto();
  std::string sig(crypto_sign_BYTES, '\0');
  if (secret_key.size() != crypto_sign_SECRETKEYBYTES) return {};
  crypto_sign_detached(reinterpret_cast<unsigned char*>(sig.data()), nullptr,
                       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                       reinterpret_cast<const unsigned char*>(secret_key.data()));
  return sig;
}

bool Verify(std::string_view message, std::string_view signature, std::string_view public_key) {
  InitCrypto();
  if (signature.size() != crypto_sign_BYTES || public_key.size() != crypto_sign_PUBLICKEYBYTES) {
    return false;
  }
  return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(),
                                     reinterpret_cast<const unsigned char*>(public_key.data())) == 0;
}

bool EqualConstantTime(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace claw
