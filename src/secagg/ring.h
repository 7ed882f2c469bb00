// The ring secure aggregation sums in (secagg/protocol.h): vectors of
// integers modulo 2^bits, masks expanded from 32-byte seeds by ChaCha20,
// values quantized from floats to [−levels, levels] and packed `bits` to a
// value on the wire.
//
// The ring is sized so that the sum of n devices' quantized values cannot
// wrap: |sum| ≤ n · levels < 2^(bits−1). int8 levels (127) over 16 devices
// need 12 bits, 1.5 bytes a value, against int8 compression's one.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace claw::secagg {

using Seed = std::array<uint8_t, 32>;

// The levels a delta's values are quantized to (±127, int8's range).
constexpr uint32_t kLevels = 127;

// The fewest bits for the sum of `devices` values in [−levels, levels].
int RingBits(uint32_t devices, uint32_t levels);

// acc[i] = acc[i] ± mask[i] mod 2^bits, mask = the seed's ChaCha20-IETF
// stream (zero nonce) read as little-endian 32-bit words, on every device
// whatever its byte order.
void AddMask(std::span<uint32_t> acc, const Seed& seed, int bits, bool subtract);

// Stochastic rounding of x / range · levels to an integer in
// [−levels, levels] (values beyond ±range are clamped), as a ring element;
// unbiased for values within the range. Returns how many were clamped.
size_t Quantize(std::span<const float> x, double range, uint32_t levels, int bits,
                std::vector<uint32_t>* out);

// A ring element as a signed integer (the upper half is negative).
int64_t Signed(uint32_t v, int bits);

// `bits` per value, little-endian bit order; the last byte zero-padded.
std::string Pack(std::span<const uint32_t> values, int bits);
// InvalidArgument if `bytes` is not exactly `count` values' length.
Result<std::vector<uint32_t>> Unpack(std::string_view bytes, size_t count, int bits);
size_t PackedSize(size_t count, int bits);

}  // namespace claw::secagg
