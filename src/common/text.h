// Text from outside (a task's stderr, an agent's failure reason, a job's name)
// made safe to write into one log line or onto a terminal: nothing in it can
// move the cursor, clear the screen, retitle the window, overwrite a line with
// a carriage return, or start a new line that looks like one of ours.
//
// What is escaped (everything else, valid printable UTF-8, is kept as is):
//   - C0 controls (0x00..0x1F) and DEL (0x7F): \n, \r, \t, else \xNN;
//   - C1 controls (U+0080..U+009F, bytes 0xC2 0x80..0x9F): \u0080..\u009f;
//   - bytes that are not valid UTF-8 (stray continuation bytes, truncated or
//     overlong sequences, surrogates, past U+10FFFF): each \xNN.
// The result is for people, not for parsing back: a backslash is kept as is,
// so a text that contains "\x1b" literally reads the same as an escaped ESC.
// Machine-readable output (JSON, --json, downloaded files) must not go
// through this. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace claw {

enum class TextLayout {
  kOneLine,    // for a log line or a table cell: newline and tab escaped too
  kMultiLine,  // for a block on a terminal: newline and tab kept
};

// `text` with control characters and invalid UTF-8 escaped as above.
std::string EscapeControl(std::string_view text, TextLayout layout = TextLayout::kOneLine);

// &, <, >, " and ' as XML entities (element text and attribute values).
std::string XmlEscape(std::string_view text);

}  // namespace claw
