#include "tensors/tokens.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "tensors/file_head.h"

namespace claw::tensors {
namespace {

constexpr std::string_view kMagic("CLAWTOK", 7);
constexpr unsigned char kVersion = 1;

uint64_t LittleEndian(std::string_view bytes, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}

void Append(std::string* out, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string Header(uint32_t width, uint32_t vocab, uint64_t count) {
  std::string out(kMagic);
  out.push_back(static_cast<char>(kVersion));
  Append(&out, width, 4);
  Append(&out, vocab, 4);
  Append(&out, count, 8);
  return out;
}

}  // namespace

Result<TokenHeader> ParseTokenHeader(std::string_view prefix, uint64_t file_size, const TokenLimits& limits) {
  if (prefix.size() < kTokenHeaderBytes || file_size < kTokenHeaderBytes) {
    return InvalidArgument("tokens: " + std::to_string(file_size) + " bytes, shorter than the " +
                           std::to_string(kTokenHeaderBytes) + "-byte header");
  }
  if (prefix.substr(0, kMagic.size()) != kMagic) {
    return InvalidArgument("tokens: not a token file (it does not start with \"CLAWTOK\"; "
                           "the format: docs/models.md)");
  }
  if (static_cast<unsigned char>(prefix[7]) != kVersion) {
    return InvalidArgument("tokens: version " + std::to_string(static_cast<unsigned char>(prefix[7])) +
                           "; this reader knows version 1");
  }
  TokenHeader h;
  const uint64_t width = LittleEndian(prefix, 8, 4), vocab = LittleEndian(prefix, 12, 4);
  h.count = LittleEndian(prefix, 16, 8);
  if (width != 1 && width != 2 && width != 4) {
    return InvalidArgument("tokens: width " + std::to_string(width) + " bytes; 1, 2 or 4");
  }
  h.width = static_cast<uint32_t>(width);
  if (vocab < 2 || (width < 4 && vocab > (uint64_t{1} << (8 * width)))) {
    return InvalidArgument("tokens: a vocabulary of " + std::to_string(vocab) + " in tokens of " +
                           std::to_string(width) + " bytes (from 2 to " +
                           std::to_string(width < 4 ? uint64_t{1} << (8 * width) : uint64_t{1} << 32) + ")");
  }
  if (vocab > limits.max_vocab) {
    return InvalidArgument("tokens: a vocabulary of " + std::to_string(vocab) + " is over the limit of " +
                           std::to_string(limits.max_vocab));
  }
  h.vocab = static_cast<uint32_t>(vocab);
  if (h.count > limits.max_count) {
    return InvalidArgument("tokens: " + std::to_string(h.count) + " tokens is over the limit of " +
                           std::to_string(limits.max_count));
  }
  const uint64_t data = file_size - kTokenHeaderBytes;
  if (data != h.count * h.width) {  // count ≤ 2^36, width ≤ 4: no overflow
    return InvalidArgument("tokens: the header says " + std::to_string(h.count) + " tokens of " +
                           std::to_string(h.width) + " bytes, the file holds " + std::to_string(data) +
                           " bytes of them");
  }
  return h;
}

Result<TokenHeader> ReadTokenHeader(const std::string& path, const TokenLimits& limits) {
  auto head = ReadFileHead(path, kTokenHeaderBytes);
  if (!head.ok()) return head.status();
  return ParseTokenHeader(head->bytes, head->size, limits);
}

Result<TokenHeader> CheckTokenFile(std::string_view bytes, const TokenLimits& limits) {
  auto h = ParseTokenHeader(bytes, bytes.size(), limits);
  if (!h.ok()) return h.status();
  if (h->width == 1 && h->vocab == 256) return h;  // every byte is a token
  for (uint64_t i = 0; i < h->count; ++i) {
    const uint32_t t = TokenAt(bytes, *h, i);
    if (t >= h->vocab) {
      return InvalidArgument("tokens: token " + std::to_string(i) + " is " + std::to_string(t) +
                             ", outside the vocabulary of " + std::to_string(h->vocab));
    }
  }
  return h;
}

Result<std::string> WriteTokenFile(std::span<const uint32_t> tokens, uint32_t vocab) {
  if (vocab < 2) return InvalidArgument("tokens: a vocabulary of at least 2");
  const uint32_t width = vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4;
  std::string out = Header(width, vocab, tokens.size());
  out.reserve(out.size() + tokens.size() * width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab) {
      return InvalidArgument("tokens: token " + std::to_string(i) + " is " + std::to_string(tokens[i]) +
                             ", outside the vocabulary of " + std::to_string(vocab));
    }
    Append(&out, tokens[i], width);
  }
  return out;
}

std::string TextTokenFile(std::string_view text) {
  std::string out = Header(1, 256, text.size());
  out.append(text);
  return out;
}

}  // namespace claw::tensors
