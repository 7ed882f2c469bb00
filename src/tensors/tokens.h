// Token files: a language model's training text as a stream of token ids.
//
//   offset  size  field
//        0     8  magic "CLAWTOK" then the version, 0x01
//        8     4  width: bytes per token, 1, 2 or 4 (uint32, little-endian)
//       12     4  vocab: every token is below it, 2 ≤ vocab ≤ 2^(8·width)
//       16     8  count: tokens in the file (uint64, little-endian)
//       24        count tokens, unsigned little-endian integers of `width` bytes
//
// The file is exactly 24 + count·width bytes. A text file becomes one of
// byte tokens (width 1, vocab 256) as it is; a tokenizer's ids go in width 2
// or 4 (Python: struct.pack("<7sBIIQ", b"CLAWTOK", 1, 2, vocab, n) followed
// by numpy.asarray(ids, "<u2").tobytes()).
//
// A training reads the stream as rows: windows of `block` + 1 tokens, one
// after another, inputs the first `block` tokens of a window, targets the
// last `block` (each input's next token). Token files come from users and
// are read on contributors' machines: the magic, width, vocabulary, count,
// exact size and every token are checked, and an error names the fault.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace claw::tensors {

inline constexpr uint64_t kTokenHeaderBytes = 24;

struct TokenHeader {
  uint32_t width = 1;  // bytes per token
  uint32_t vocab = 256;
  uint64_t count = 0;

  // Rows of `block` tokens (and their next tokens): (count - 1) / block.
  uint64_t Windows(uint64_t block) const { return block == 0 || count < 2 ? 0 : (count - 1) / block; }
};

struct TokenLimits {
  uint64_t max_count = uint64_t{1} << 36;
  uint32_t max_vocab = uint32_t{1} << 24;  // an embedding table of 16M rows
};

// `prefix`: at least the file's first 24 bytes; `file_size`: its whole size.
Result<TokenHeader> ParseTokenHeader(std::string_view prefix, uint64_t file_size,
                                     const TokenLimits& limits = {});

// The header of the token file at `path` (its first bytes alone).
Result<TokenHeader> ReadTokenHeader(const std::string& path, const TokenLimits& limits = {});

// The header, and every token of `bytes` (a whole file) checked against the
// vocabulary: the first one out of it is named with its position.
Result<TokenHeader> CheckTokenFile(std::string_view bytes, const TokenLimits& limits = {});

// The token at `index` of a checked file's bytes.
inline uint32_t TokenAt(std::string_view bytes, const TokenHeader& h, uint64_t index) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + kTokenHeaderBytes + index * h.width);
  uint32_t v = 0;
  for (uint32_t b = 0; b < h.width; ++b) v |= static_cast<uint32_t>(p[b]) << (8 * b);
  return v;
}

// A token file of `tokens`, each below `vocab`, in the narrowest width that
// holds the vocabulary. InvalidArgument if a token is not below it.
Result<std::string> WriteTokenFile(std::span<const uint32_t> tokens, uint32_t vocab);

// A text as byte tokens (width 1, vocab 256): its bytes as they are.
std::string TextTokenFile(std::string_view text);

}  // namespace claw::tensors
