// EscapeControl: outside text made safe for one log line or a terminal.
#include "common/text.h"

#include <gtest/gtest.h>

#include <string>

namespace claw {
namespace {

using namespace std::string_literals;  // "\0"s keeps the NUL

TEST(EscapeControl, KeepsPrintableAsciiAsIs) {
  EXPECT_EQ(EscapeControl(""), "");
  EXPECT_EQ(EscapeControl("exit code 3; stderr: no such file 'x' (see \\docs)"),
            "exit code 3; stderr: no such file 'x' (see \\docs)");
}

TEST(EscapeControl, EscapesTerminalEscapeSequences) {
  EXPECT_EQ(EscapeControl("\x1b[2Jcleared"), "\\x1b[2Jcleared");
  EXPECT_EQ(EscapeControl("\x1b]0;owned\x07title"), "\\x1b]0;owned\\x07title");
  EXPECT_EQ(EscapeControl("\x1b[2J", TextLayout::kMultiLine), "\\x1b[2J");
}

TEST(EscapeControl, EscapesCarriageReturnsInBothLayouts) {
  EXPECT_EQ(EscapeControl("100%\rall good"), "100%\\rall good");
  EXPECT_EQ(EscapeControl("a\r\nb", TextLayout::kMultiLine), "a\\r\nb");
}

TEST(EscapeControl, ANewlineCannotForgeALogLine) {
  std::string forged = "bad input\n13:00:00.000 info [coordinator] job done";
  std::string line = EscapeControl(forged);
  EXPECT_EQ(line, "bad input\\n13:00:00.000 info [coordinator] job done");
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(EscapeControl, MultiLineKeepsNewlinesAndTabsOnly) {
  EXPECT_EQ(EscapeControl("one\n\ttwo\n", TextLayout::kMultiLine), "one\n\ttwo\n");
  EXPECT_EQ(EscapeControl("one\n\ttwo\n"), "one\\n\\ttwo\\n");
  EXPECT_EQ(EscapeControl("a\0b\x08\x7f"s, TextLayout::kMultiLine), "a\\x00b\\x08\\x7f");
}

TEST(EscapeControl, EscapesEveryC0ControlAndDel) {
  for (int c = 0; c < 0x20; ++c) {
    std::string out = EscapeControl(std::string(1, static_cast<char>(c)));
    ASSERT_EQ(out[0], '\\') << c;
    for (char o : out) EXPECT_GE(static_cast<unsigned char>(o), 0x20) << c;
  }
  EXPECT_EQ(EscapeControl("\x7f"), "\\x7f");
  EXPECT_EQ(EscapeControl("\x01\x1f"), "\\x01\\x1f");
}

TEST(EscapeControl, EscapesC1Controls) {
  // U+009B is CSI: "\xc2\x9b" "2J" clears the screen on terminals that take
  // 8-bit controls; U+0085 is NEL, a newline to some viewers.
  EXPECT_EQ(EscapeControl("\xc2\x9b"
                          "2J"),
            "\\u009b2J");
  EXPECT_EQ(EscapeControl("a\xc2\x85"
                          "b"),
            "a\\u0085b");
  EXPECT_EQ(EscapeControl("\xc2\x80\xc2\x9f", TextLayout::kMultiLine), "\\u0080\\u009f");
  EXPECT_EQ(EscapeControl("\xc2\xa0\xc2\xa9"), "\xc2\xa0\xc2\xa9");  // NBSP and © are printable
}

TEST(EscapeControl, EscapesInvalidUtf8ByteByByte) {
  EXPECT_EQ(EscapeControl("\x9b"
                          "2J"),
            "\\x9b2J");                                         // a bare C1 byte (Latin-1 CSI)
  EXPECT_EQ(EscapeControl("\xff\xfe"), "\\xff\\xfe");           // never in UTF-8
  EXPECT_EQ(EscapeControl("a\xc3"), "a\\xc3");                  // cut short at the end
  EXPECT_EQ(EscapeControl("\xe2\x82z"), "\\xe2\\x82z");         // cut short before an ASCII byte
  EXPECT_EQ(EscapeControl("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(EscapeControl("\xe0\x80\x8a"), "\\xe0\\x80\\x8a");  // overlong '\n'
  EXPECT_EQ(EscapeControl("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(EscapeControl("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  // After a bad byte the next character is read afresh.
  EXPECT_EQ(EscapeControl("\x80\xc3\xa9\x1b"), "\\x80\xc3\xa9\\x1b");
}

TEST(EscapeControl, KeepsValidMultibyteUtf8) {
  std::string text =
      "caf\xc3\xa9 \xe2\x82\xac \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf";
  EXPECT_EQ(EscapeControl(text), text);
  EXPECT_EQ(EscapeControl(text, TextLayout::kMultiLine), text);
}

}  // namespace
}  // namespace claw
