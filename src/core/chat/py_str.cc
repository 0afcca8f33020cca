// Python `str` semantics over UTF-8 bytes (see py_str.h).
#include "core/chat/py_str.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>

namespace petrel::chat {
namespace {

bool IsCased(char32_t c) {
  const utf8proc_category_t cat = utf8proc_category(int32_t(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

char32_t ToUpper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return char32_t(utf8proc_toupper(int32_t(c)));
}
char32_t ToLower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return char32_t(utf8proc_tolower(int32_t(c)));
}
char32_t ToTitle(char32_t c) {
  if (c < 0x80) return ToUpper(c);
  return char32_t(utf8proc_totitle(int32_t(c)));
}

template <typename Fn>
std::string MapCodePoints(std::string_view text, Fn fn) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : DecodeUtf8(text)) AppendUtf8(fn(c), &out);
  return out;
}

// The common one-to-many mappings of Unicode SpecialCasing.txt that Python applies (upper, title).
const char* SpecialUpper(char32_t c, bool title) {
  switch (c) {
    case 0xDF:
      return title ? "Ss" : "SS";
    case 0xFB00:
      return title ? "Ff" : "FF";
    case 0xFB01:
      return title ? "Fi" : "FI";
    case 0xFB02:
      return title ? "Fl" : "FL";
    case 0xFB03:
      return title ? "Ffi" : "FFI";
    case 0xFB04:
      return title ? "Ffl" : "FFL";
    case 0xFB05:
    case 0xFB06:
      return title ? "St" : "ST";
    case 0x149:
      return "\u02BCN";
    default:
      return nullptr;
  }
}

void AppendUpper(char32_t c, bool title, std::string* out) {
  if (c >= 0x80) {
    if (const char* special = SpecialUpper(c, title)) {
      *out += special;
      return;
    }
  }
  AppendUtf8(title ? ToTitle(c) : ToUpper(c), out);
}

// Python's printable set: everything except categories C* and Z*, with ' ' allowed.
bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7f) return false;
  if (c < 0x7f) return true;
  if (c >= 0xDC80 && c <= 0xDCFF) return false;  // escaped invalid bytes
  switch (utf8proc_category(int32_t(c))) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return false;
    default:
      return true;
  }
}

}  // namespace

std::u32string DecodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t b0 = uint8_t(text[i]);
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    size_t len = b0 >= 0xF0 && b0 < 0xF5 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 && b0 < 0xE0 ? 2 : 0;
    if (b0 >= 0xF5) len = 0;
    char32_t cp = len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    bool valid = len != 0 && i + len <= text.size();
    for (size_t k = 1; valid && k < len; ++k) {
      const uint8_t b = uint8_t(text[i + k]);
      if ((b & 0xC0) != 0x80) valid = false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (valid && ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                  (cp >= 0xD800 && cp <= 0xDFFF))) {
      valid = false;
    }
    if (!valid) {
      out.push_back(0xDC00 + b0);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // surrogateescape: the original byte
    out->push_back(char(cp - 0xDC00));
  } else if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) AppendUtf8(c, &out);
  return out;
}

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (uint8_t(c) >= 0x80) return false;
  }
  return true;
}

size_t CodePointCount(std::string_view text) {
  return IsAscii(text) ? text.size() : DecodeUtf8(text).size();
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                    bool right) {
  const std::u32string cps = DecodeUtf8(text);
  const std::u32string strip_set = chars ? DecodeUtf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? strip_set.find(c) != std::u32string::npos : IsPySpace(c);
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip_it(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(cps[end - 1])) --end;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> PySplit(std::string_view text, const std::optional<std::string>& sep,
                                 int64_t max_split) {
  std::vector<std::string> parts;
  if (sep) {
    size_t pos = 0;
    while (max_split < 0 || int64_t(parts.size()) < max_split) {
      const size_t hit = text.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(text.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    parts.emplace_back(text.substr(pos));
    return parts;
  }
  const std::u32string cps = DecodeUtf8(text);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (max_split >= 0 && int64_t(parts.size()) == max_split) {
      size_t end = cps.size();
      while (end > i && IsPySpace(cps[end - 1])) --end;
      parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, end - i)));
      break;
    }
    const size_t start = i;
    while (i < cps.size() && !IsPySpace(cps[i])) ++i;
    parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(start, i - start)));
  }
  return parts;
}

std::vector<std::string> PyRSplit(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t max_split) {
  if (max_split < 0) return PySplit(text, sep, max_split);
  std::vector<std::string> parts;
  if (sep) {
    size_t end = text.size();
    while (int64_t(parts.size()) < max_split) {
      if (end < sep->size()) break;
      const size_t hit = text.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(text.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(text.substr(0, end));
  } else {
    const std::u32string cps = DecodeUtf8(text);
    size_t i = cps.size();
    while (true) {
      while (i > 0 && IsPySpace(cps[i - 1])) --i;
      if (i == 0) break;
      if (int64_t(parts.size()) == max_split) {
        size_t begin = 0;
        while (begin < i && IsPySpace(cps[begin])) ++begin;
        parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(begin, i - begin)));
        break;
      }
      const size_t end = i;
      while (i > 0 && !IsPySpace(cps[i - 1])) --i;
      parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(i, end - i)));
    }
  }
  return {parts.rbegin(), parts.rend()};
}

std::vector<std::string> PySplitLines(std::string_view text, bool keep_ends) {
  const std::u32string cps = DecodeUtf8(text);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    const char32_t c = cps[i];
    const bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                          c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    if (c == '\r' && end < cps.size() && cps[end] == '\n') ++end;
    const size_t content_end = keep_ends ? end : i;
    lines.push_back(EncodeUtf8(std::u32string_view(cps).substr(start, content_end - start)));
    start = i = end;
  }
  if (start < cps.size()) lines.push_back(EncodeUtf8(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string PyReplace(std::string_view text, std::string_view old_text, std::string_view new_text,
                      int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new_text` before every code point and at the end.
    const std::u32string cps = DecodeUtf8(text);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      AppendUtf8(c, &out);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = text.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out += text.substr(pos, hit - pos);
    out += new_text;
    pos = hit + old_text.size();
    ++done;
  }
  out += text.substr(pos);
  return out;
}

std::string PyUpper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : DecodeUtf8(text)) AppendUpper(c, false, &out);
  return out;
}
std::string PyLower(std::string_view text) { return MapCodePoints(text, ToLower); }
std::string PySwapCase(std::string_view text) {
  return MapCodePoints(text, [](char32_t c) {
    const utf8proc_category_t cat = utf8proc_category(int32_t(c));
    if (cat == UTF8PROC_CATEGORY_LU) return ToLower(c);
    if (cat == UTF8PROC_CATEGORY_LL) return ToUpper(c);
    return c;
  });
}

std::string PyCapitalize(std::string_view text) {
  std::string out;
  bool first = true;
  for (char32_t c : DecodeUtf8(text)) {
    if (first) {
      AppendUpper(c, true, &out);
    } else {
      AppendUtf8(ToLower(c), &out);
    }
    first = false;
  }
  return out;
}

std::string PyTitle(std::string_view text) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : DecodeUtf8(text)) {
    if (previous_cased) {
      AppendUtf8(ToLower(c), &out);
    } else {
      AppendUpper(c, true, &out);
    }
    previous_cased = IsCased(c);
  }
  return out;
}

bool PyIsUpper(std::string_view text) {
  bool any_cased = false;
  for (char32_t c : DecodeUtf8(text)) {
    const utf8proc_category_t cat = utf8proc_category(int32_t(c));
    if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return false;
    if (cat == UTF8PROC_CATEGORY_LU) any_cased = true;
  }
  return any_cased;
}

bool PyIsLower(std::string_view text) {
  bool any_cased = false;
  for (char32_t c : DecodeUtf8(text)) {
    const utf8proc_category_t cat = utf8proc_category(int32_t(c));
    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false;
    if (cat == UTF8PROC_CATEGORY_LL) any_cased = true;
  }
  return any_cased;
}

bool IsPyAlpha(char32_t c) {
  const utf8proc_category_t cat = utf8proc_category(int32_t(c));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
bool IsPyDigit(char32_t c) { return utf8proc_category(int32_t(c)) == UTF8PROC_CATEGORY_ND; }
bool IsPyAlnum(char32_t c) {
  const utf8proc_category_t cat = utf8proc_category(int32_t(c));
  return IsPyAlpha(c) || (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string PyReprString(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(text)) {
    char buf[16];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == char32_t(quote)) {
      out += '\\';
      out += quote;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (IsPrintable(c)) {
      AppendUtf8(c, &out);
    } else {
      if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", unsigned(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", unsigned(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", unsigned(c));
      }
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);
  // sci: [-]d[.ddd]e[+-]XX
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      const size_t int_digits = size_t(exponent) + 1;
      if (digits.size() <= int_digits) {
        out += digits;
        out.append(int_digits - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_digits);
        out += '.';
        out += digits.substr(int_digits);
      }
    } else {
      out += "0.";
      out.append(size_t(-exponent - 1), '0');
      out += digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

}  // namespace petrel::chat
