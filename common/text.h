// Text that came from someone else (a node's registration, a rank's log, a job's reason), shown
// on a terminal or stored: control characters are what a terminal acts on (escape sequences move
// the cursor, retitle the window, or worse), so they are refused where a field should have none
// and made visible (`\x1b`) wherever such text is printed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8rt {

// Whether `s` holds a C0 control character (below 0x20), DEL (0x7f) or a C1 control (U+0080..
// U+009F as UTF-8, or a lone byte 0x80..0x9f), other than those in `allowed` (e.g. "\n\t").
bool HasControlChars(std::string_view s, std::string_view allowed = "");

// `s` with every control character (as above) but those in `keep` written as `\xNN` (C1 as
// `\u0085`), a backslash that would read as one doubled, and bytes that are not UTF-8 as `\xNN`:
// safe to print. Printable text passes unchanged.
std::string Printable(std::string_view s, std::string_view keep = "");

// The word of `known` closest to `word` (Levenshtein distance, at most a third of its length,
// at least 1), for "did you mean" hints; "" when none is that close.
std::string Closest(std::string_view word, const std::vector<std::string>& known);

}  // namespace fp8rt
