// Shamir's secret sharing over GF(2^8), byte by byte (the field of AES,
// x^8 + x^4 + x^3 + x + 1): a secret of any length splits into shares
// numbered 1..255, any `threshold` of which give it back and fewer of which
// say nothing about it. Used by secure aggregation (secagg/protocol.h) to
// share each device's mask secrets among its neighbours.
//
// Multiplication is branch-free and without table lookups, so that
// splitting a device's secret does not leak it through timing or caches.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace claw::secagg {

struct Share {
  uint8_t x = 0;            // its number, 1..255
  std::string y;            // as long as the secret
};

// Shares numbered xs (distinct, nonzero) of `secret`; threshold in
// [1, xs.size()]. Random coefficients from libsodium.
std::vector<Share> Split(std::string_view secret, size_t threshold, std::span<const uint8_t> xs);

// The secret from `threshold` of the shares (the first that many are used).
// InvalidArgument: fewer shares, shares of different lengths, a repeated or
// zero number.
Result<std::string> Combine(std::span<const Share> shares, size_t threshold);

// GF(2^8) arithmetic, for the tests.
uint8_t GfMul(uint8_t a, uint8_t b);
uint8_t GfInv(uint8_t a);  // a != 0

}  // namespace claw::secagg
