#include "common/text.h"

#include <cstdint>

namespace claw {
namespace {

void AppendHexByte(std::string& out, const char* prefix, uint8_t b) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += prefix;
  out += kHex[b >> 4];
  out += kHex[b & 0xF];
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// The length of the valid UTF-8 sequence of 2 to 4 bytes at the start of
// `s`, or 0 when there is none (RFC 3629: no overlong forms, no surrogates,
// nothing past U+10FFFF).
size_t MultibyteLength(std::string_view s) {
  auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  uint8_t lead = byte(0);
  size_t n;
  uint8_t low = 0x80, high = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (!IsContinuation(byte(i))) return 0;
  }
  return n;
}

}  // namespace

std::string EscapeControl(std::string_view text, TextLayout layout) {
  const bool multi_line = layout == TextLayout::kMultiLine;
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint8_t b = static_cast<uint8_t>(text[i]);
    if (b >= 0x20 && b < 0x7F) {
      out += static_cast<char>(b);
      ++i;
    } else if (b == '\n') {
      out += multi_line ? "\n" : "\\n";
      ++i;
    } else if (b == '\t') {
      out += multi_line ? "\t" : "\\t";
      ++i;
    } else if (b == '\r') {
      out += "\\r";
      ++i;
    } else if (b < 0x80) {  // the other C0 controls and DEL
      AppendHexByte(out, "\\x", b);
      ++i;
    } else if (size_t n = MultibyteLength(text.substr(i)); n == 0) {
      AppendHexByte(out, "\\x", b);
      ++i;
    } else if (b == 0xC2 && static_cast<uint8_t>(text[i + 1]) <= 0x9F) {  // C1: U+0080..U+009F
      AppendHexByte(out, "\\u00", static_cast<uint8_t>(text[i + 1]));
      i += 2;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace claw
