#include "secagg/ring.h"

#include <sodium.h>

#include <algorithm>
#include <bit>
#include <cmath>

namespace claw::secagg {

int RingBits(uint32_t devices, uint32_t levels) {
  const uint64_t max = uint64_t{devices} * levels;  // |sum| ≤ max < 2^(bits−1)
  int bits = 1;
  while ((uint64_t{1} << (bits - 1)) <= max) ++bits;
  return bits;
}

void AddMask(std::span<uint32_t> acc, const Seed& seed, int bits, bool subtract) {
  const uint32_t mask = bits >= 32 ? 0xFFFFFFFFu : (uint32_t{1} << bits) - 1;
  static constexpr unsigned char kNonce[crypto_stream_chacha20_ietf_NONCEBYTES] = {};
  // 16,384 values (64 KiB, whole ChaCha20 blocks) at a time.
  std::vector<uint32_t> block(std::min<size_t>(acc.size(), 16384));
  for (size_t at = 0; at < acc.size(); at += block.size()) {
    const size_t n = std::min(block.size(), acc.size() - at);
    // The stream continues block after block (its 64-byte counter).
    std::fill(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(n), 0u);
    auto* bytes = reinterpret_cast<unsigned char*>(block.data());
    crypto_stream_chacha20_ietf_xor_ic(bytes, bytes, n * sizeof(uint32_t), kNonce,
                                       static_cast<uint32_t>(at * sizeof(uint32_t) / 64),
                                       seed.data());
    if constexpr (std::endian::native == std::endian::big) {
      // The stream is read as little-endian words on every device.
      for (size_t i = 0; i < n; ++i) block[i] = __builtin_bswap32(block[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      acc[at + i] = (subtract ? acc[at + i] - block[i] : acc[at + i] + block[i]) & mask;
    }
  }
}

size_t Quantize(std::span<const float> x, double range, uint32_t levels, int bits,
                std::vector<uint32_t>* out) {
  const uint32_t mask = bits >= 32 ? 0xFFFFFFFFu : (uint32_t{1} << bits) - 1;
  out->resize(x.size());
  std::vector<uint32_t> noise(x.size());
  randombytes_buf(noise.data(), noise.size() * sizeof(uint32_t));
  size_t clamped = 0;
  const double scale = levels / range;
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i] * scale;
    if (!(v >= -double(levels))) {  // NaN too
      v = -double(levels);
      clamped++;
    } else if (v > levels) {
      v = levels;
      clamped++;
    }
    // Up with probability equal to the fraction: unbiased.
    const double lo = std::floor(v);
    const double u = noise[i] * 0x1.0p-32;
    const auto q = static_cast<int64_t>(lo) + (u < v - lo ? 1 : 0);
    (*out)[i] = static_cast<uint32_t>(q) & mask;
  }
  return clamped;
}

int64_t Signed(uint32_t v, int bits) {
  if (bits >= 32) return static_cast<int32_t>(v);
  const uint32_t half = uint32_t{1} << (bits - 1);
  return v >= half ? int64_t{v} - (int64_t{1} << bits) : int64_t{v};
}

size_t PackedSize(size_t count, int bits) { return (count * static_cast<size_t>(bits) + 7) / 8; }

std::string Pack(std::span<const uint32_t> values, int bits) {
  std::string out(PackedSize(values.size(), bits), '\0');
  uint64_t acc = 0;
  int have = 0;
  size_t at = 0;
  for (uint32_t v : values) {
    acc |= uint64_t{v} << have;
    have += bits;
    while (have >= 8) {
      out[at++] = static_cast<char>(acc & 0xFF);
      acc >>= 8;
      have -= 8;
    }
  }
  if (have > 0) out[at] = static_cast<char>(acc & 0xFF);
  return out;
}

Result<std::vector<uint32_t>> Unpack(std::string_view bytes, size_t count, int bits) {
  if (bytes.size() != PackedSize(count, bits)) {
    return InvalidArgument("a masked vector of " + std::to_string(bytes.size()) + " bytes, not " +
                           std::to_string(PackedSize(count, bits)) + " (" + std::to_string(count) +
                           " values of " + std::to_string(bits) + " bits)");
  }
  const uint32_t mask = bits >= 32 ? 0xFFFFFFFFu : (uint32_t{1} << bits) - 1;
  std::vector<uint32_t> out(count);
  uint64_t acc = 0;
  int have = 0;
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    while (have < bits) {
      acc |= uint64_t{static_cast<uint8_t>(bytes[at++])} << have;
      have += 8;
    }
    out[i] = static_cast<uint32_t>(acc) & mask;
    acc >>= bits;
    have -= bits;
  }
  return out;
}

}  // namespace claw::secagg
