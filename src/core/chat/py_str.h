// Python `str` semantics over UTF-8 bytes: code points, whitespace, case, split/strip, repr,
// floats.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace petrel::chat {

// Decodes UTF-8 into code points. An invalid byte b becomes U+DC00+b (Python's surrogateescape),
// so that `EncodeUtf8(DecodeUtf8(s)) == s` for any bytes.
std::u32string DecodeUtf8(std::string_view text);
void AppendUtf8(char32_t code_point, std::string* out);
std::string EncodeUtf8(std::u32string_view code_points);
// len(s) in code points; ASCII-only strings take a fast path.
size_t CodePointCount(std::string_view text);
bool IsAscii(std::string_view text);

// str.isspace() for one code point (Python's Unicode whitespace set).
bool IsPySpace(char32_t code_point);

// str.strip/lstrip/rstrip; `chars` unset strips whitespace.
std::string PyStrip(std::string_view text, const std::optional<std::string>& chars, bool left,
                    bool right);
// str.split / str.rsplit; `sep` unset splits on whitespace runs. `max_split` < 0: no limit.
std::vector<std::string> PySplit(std::string_view text, const std::optional<std::string>& sep,
                                 int64_t max_split);
std::vector<std::string> PyRSplit(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t max_split);
std::vector<std::string> PySplitLines(std::string_view text, bool keep_ends);
// str.replace; `count` < 0 replaces all.
std::string PyReplace(std::string_view text, std::string_view old_text, std::string_view new_text,
                      int64_t count);
// Case mappings (simple, one code point to one).
std::string PyUpper(std::string_view text);
std::string PyLower(std::string_view text);
std::string PyCapitalize(std::string_view text);
std::string PyTitle(std::string_view text);  // str.title()
std::string PySwapCase(std::string_view text);
bool PyIsUpper(std::string_view text);
bool PyIsLower(std::string_view text);
bool IsPyAlnum(char32_t code_point);
bool IsPyAlpha(char32_t code_point);
bool IsPyDigit(char32_t code_point);

// markupsafe.escape: & < > " ' as entities.
std::string HtmlEscape(std::string_view text);
// repr(str): single quotes unless the text holds ' and no ", non-printables escaped.
std::string PyReprString(std::string_view text);
// repr(float): shortest round-trip digits, `1.0`, `1e+16`, `inf`, `nan`.
std::string PyFloatRepr(double value);

}  // namespace petrel::chat
