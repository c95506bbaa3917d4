// Control characters refused and made visible (common/text.h).
#include "common/text.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace fp8rt {
namespace {

// The length of the UTF-8 sequence at s[i] and its code point; 0 when the bytes are not UTF-8.
size_t Utf8At(std::string_view s, size_t i, uint32_t* cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t n = 0;
  uint32_t v = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2, v = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, v = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, v = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

bool IsControl(uint32_t cp) { return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f); }

bool Kept(uint32_t cp, std::string_view keep) {
  return cp < 0x80 && keep.find(static_cast<char>(cp)) != std::string_view::npos;
}

}  // namespace

bool HasControlChars(std::string_view s, std::string_view allowed) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = Utf8At(s, i, &cp);
    if (n == 0) {
      const auto b = static_cast<unsigned char>(s[i]);
      if (b >= 0x80 && b <= 0x9f) return true;  // a lone C1 byte (Latin-1 text)
      ++i;
      continue;
    }
    if (IsControl(cp) && !Kept(cp, allowed)) return true;
    i += n;
  }
  return false;
}

std::string Printable(std::string_view s, std::string_view keep) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = Utf8At(s, i, &cp);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
      continue;
    }
    if (IsControl(cp) && !Kept(cp, keep)) {
      std::snprintf(buf, sizeof buf, cp < 0x80 ? "\\x%02x" : "\\u%04x", cp);
      out += buf;
    } else if (cp == '\\' && i + 1 < s.size() && (s[i + 1] == 'x' || s[i + 1] == 'u')) {
      out += "\\\\";  // so that a literal "\x1b" is not read as an escaped control character
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string Closest(std::string_view word, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const std::string& k : known) {
    // Optimal string alignment distance: Levenshtein's edits plus a swap of two neighbouring
    // letters as one ("lsit" is one edit from "list"). Three rows: i - 2, i - 1, i.
    std::vector<size_t> prev2(k.size() + 1), prev(k.size() + 1), row(k.size() + 1);
    for (size_t j = 0; j <= k.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      row[0] = i;
      for (size_t j = 1; j <= k.size(); ++j) {
        row[j] = std::min({prev[j] + 1, row[j - 1] + 1,
                           prev[j - 1] + (word[i - 1] == k[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && word[i - 1] == k[j - 2] && word[i - 2] == k[j - 1]) {
          row[j] = std::min(row[j], prev2[j - 2] + 1);
        }
      }
      std::swap(prev2, prev);
      std::swap(prev, row);
    }
    if (prev[k.size()] < best_d) best_d = prev[k.size()], best = k;
  }
  return best;
}

}  // namespace fp8rt
