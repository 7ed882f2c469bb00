// Token files (tensors/tokens.h): what the format says, and every lie a file
// can tell refused with its reason.
#include "tensors/tokens.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace claw::tensors {
namespace {

std::string Field(uint64_t v, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

std::string File(uint32_t width, uint32_t vocab, uint64_t count, const std::string& body) {
  return std::string("CLAWTOK\x01", 8) + Field(width, 4) + Field(vocab, 4) + Field(count, 8) + body;
}

TEST(TokenFile, ATextIsItsBytesAndReadsAsWindowsOfNextTokens) {
  const std::string file = TextTokenFile("hello");
  ASSERT_EQ(file.size(), kTokenHeaderBytes + 5);
  auto h = CheckTokenFile(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->width, 1u);
  EXPECT_EQ(h->vocab, 256u);
  EXPECT_EQ(h->count, 5u);
  EXPECT_EQ(TokenAt(file, *h, 1), static_cast<uint32_t>('e'));
  // 5 tokens: windows of 2 (and each one's next token) are "he"→"el", "ll"→"lo".
  EXPECT_EQ(h->Windows(2), 2u);
  EXPECT_EQ(h->Windows(4), 1u);
  EXPECT_EQ(h->Windows(5), 0u);
}

TEST(TokenFile, WidthFollowsTheVocabularyAndTokensReadBack) {
  for (uint32_t vocab : {2u, 256u, 257u, 65536u, 65537u, 1u << 24}) {
    std::vector<uint32_t> tokens = {0, vocab - 1, vocab / 2, 1};
    auto bytes = WriteTokenFile(tokens, vocab);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    auto h = CheckTokenFile(*bytes);
    ASSERT_TRUE(h.ok()) << vocab << ": " << h.status().ToString();
    EXPECT_EQ(h->width, vocab <= 256 ? 1u : vocab <= 65536 ? 2u : 4u) << vocab;
    for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(TokenAt(*bytes, *h, i), tokens[i]) << vocab;
  }
  // What Python's struct and numpy write (docs/models.md), byte for byte.
  EXPECT_EQ(*WriteTokenFile(std::vector<uint32_t>{1, 258}, 300),
            File(2, 300, 2, std::string("\x01\x00\x02\x01", 4)));
  auto over = WriteTokenFile(std::vector<uint32_t>{3, 10}, 10);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("token 1 is 10, outside the vocabulary of 10"), std::string::npos)
      << over.status().message();
}

TEST(TokenFile, FilesThatLieAreRefusedNamingWhy) {
  const std::string two(2, '\x01');
  const struct {
    std::string bytes, error;
  } cases[] = {
      {"CLAWTOK", "shorter than the 24-byte header"},
      {std::string("NUMPY\x93\x01\x00", 8) + std::string(16, '\0'), "not a token file"},
      {std::string("CLAWTOK\x02", 8) + Field(1, 4) + Field(256, 4) + Field(0, 8), "version 2"},
      {File(3, 256, 0, ""), "width 3 bytes; 1, 2 or 4"},
      {File(1, 257, 0, ""), "a vocabulary of 257 in tokens of 1 bytes"},
      {File(2, 1, 0, ""), "a vocabulary of 1"},
      {File(4, 1u << 30, 0, ""), "over the limit"},
      {File(1, 256, 3, two), "the header says 3 tokens of 1 bytes, the file holds 2"},
      {File(2, 256, 1, two + "x"), "the file holds 3"},
      {File(1, 256, uint64_t{1} << 62, two), "over the limit"},
      {File(2, 300, 2, std::string("\x01\x00\x2c\x01", 4)), "token 1 is 300, outside the vocabulary of 300"},
      {File(1, 10, 2, std::string("\x09\xff", 2)), "token 1 is 255"},
  };
  for (const auto& c : cases) {
    auto h = CheckTokenFile(c.bytes);
    ASSERT_FALSE(h.ok()) << c.error;
    EXPECT_NE(h.status().message().find(c.error), std::string::npos)
        << "want: " << c.error << "\ngot: " << h.status().message();
  }
}

}  // namespace
}  // namespace claw::tensors
