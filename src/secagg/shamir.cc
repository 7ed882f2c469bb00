#include "secagg/shamir.h"

#include <sodium.h>

#include <set>

namespace claw::secagg {

uint8_t GfMul(uint8_t a, uint8_t b) {
  uint8_t p = 0;
  for (int i = 0; i < 8; ++i) {
    p ^= static_cast<uint8_t>(-(b & 1) & a);
    const auto carry = static_cast<uint8_t>(-(a >> 7));
    a = static_cast<uint8_t>((a << 1) ^ (carry & 0x1b));
    b >>= 1;
  }
  return p;
}

uint8_t GfInv(uint8_t a) {
  // a^254 = a^-1 in GF(2^8).
  uint8_t result = 1, base = a;
  for (int e = 254; e > 0; e >>= 1) {
    if (e & 1) result = GfMul(result, base);
    base = GfMul(base, base);
  }
  return result;
}

std::vector<Share> Split(std::string_view secret, size_t threshold, std::span<const uint8_t> xs) {
  std::vector<Share> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    out[i].x = xs[i];
    out[i].y.assign(secret.size(), '\0');
  }
  // One random polynomial of degree threshold - 1 per byte, whose constant
  // term is the secret's byte; evaluated by Horner's rule at each x.
  std::vector<uint8_t> coef(threshold);
  for (size_t k = 0; k < secret.size(); ++k) {
    coef[0] = static_cast<uint8_t>(secret[k]);
    if (threshold > 1) randombytes_buf(coef.data() + 1, threshold - 1);
    for (Share& s : out) {
      uint8_t y = 0;
      for (size_t c = threshold; c-- > 0;) y = static_cast<uint8_t>(GfMul(y, s.x) ^ coef[c]);
      s.y[k] = static_cast<char>(y);
    }
  }
  sodium_memzero(coef.data(), coef.size());
  return out;
}

Result<std::string> Combine(std::span<const Share> shares, size_t threshold) {
  if (threshold == 0 || shares.size() < threshold) {
    return InvalidArgument("need " + std::to_string(threshold) + " shares, have " +
                           std::to_string(shares.size()));
  }
  const auto use = shares.first(threshold);
  std::set<uint8_t> seen;
  for (const Share& s : use) {
    if (s.x == 0) return InvalidArgument("a share numbered 0");
    if (!seen.insert(s.x).second) return InvalidArgument("share " + std::to_string(s.x) + " twice");
    if (s.y.size() != use.front().y.size()) return InvalidArgument("shares of different lengths");
  }
  // Lagrange at 0: secret = Σ y_i · Π_{j≠i} x_j / (x_j − x_i); minus is
  // plus in GF(2^8).
  std::vector<uint8_t> basis(use.size());
  for (size_t i = 0; i < use.size(); ++i) {
    uint8_t num = 1, den = 1;
    for (size_t j = 0; j < use.size(); ++j) {
      if (j == i) continue;
      num = GfMul(num, use[j].x);
      den = GfMul(den, static_cast<uint8_t>(use[j].x ^ use[i].x));
    }
    basis[i] = GfMul(num, GfInv(den));
  }
  std::string secret(use.front().y.size(), '\0');
  for (size_t k = 0; k < secret.size(); ++k) {
    uint8_t v = 0;
    for (size_t i = 0; i < use.size(); ++i) {
      v ^= GfMul(basis[i], static_cast<uint8_t>(use[i].y[k]));
    }
    secret[k] = static_cast<char>(v);
  }
  return secret;
}

}  // namespace claw::secagg
