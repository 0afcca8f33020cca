// UTF-8 and Unicode helpers for the tokenizers: decoding with one fixed policy for invalid bytes,
// character classes (utf8proc), normalization forms and the GPT-2 byte <-> character table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace petrel::tok {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Decodes the character at `*pos` and advances `*pos`. A byte that does not start a complete,
// valid, shortest-form sequence yields U+FFFD and consumes exactly one byte.
uint32_t DecodeUtf8(std::string_view text, size_t* pos);
// Byte length of the character at `pos` under the same policy (1 for an invalid byte).
size_t Utf8CharLen(std::string_view text, size_t pos);
void AppendUtf8(uint32_t cpt, std::string* out);
// Copies `text`, replacing each invalid byte by U+FFFD. Returns the input unchanged when valid.
std::string SanitizeUtf8(std::string_view text);
// Offset of the first byte that does not start a valid sequence, or npos when `text` is valid.
size_t FirstInvalidUtf8(std::string_view text);
// Number of bytes at the end of `text` that form a valid but unfinished sequence (0..3).
size_t IncompleteUtf8Tail(std::string_view text);
std::vector<uint32_t> ToCodepoints(std::string_view text);

// Character classes. Categories come from utf8proc's Unicode tables.
bool IsLetter(uint32_t cpt);
bool IsNumber(uint32_t cpt);
bool IsPunctuation(uint32_t cpt);
bool IsSymbol(uint32_t cpt);
bool IsNonSpacingMark(uint32_t cpt);  // Mn
bool IsOther(uint32_t cpt);           // Cc, Cf, Cs, Co, Cn
bool IsWhitespace(uint32_t cpt);      // the Unicode White_Space property (Rust char::is_whitespace)
bool IsChineseChar(uint32_t cpt);     // the CJK blocks BERT isolates
uint32_t ToLower(uint32_t cpt);

enum class NormForm { kNfc, kNfd, kNfkc, kNfkd };
std::string Normalize(std::string_view text, NormForm form);  // input must be valid UTF-8
std::string Lowercase(std::string_view text);
std::string StripAccents(std::string_view text);  // NFD, then drop non-spacing marks

// GPT-2 byte-level alphabet: every byte maps to one printable character.
std::string_view ByteToUnicode(uint8_t byte);  // UTF-8 of the character for `byte`
int UnicodeToByte(uint32_t cpt);               // -1 if `cpt` is not in the alphabet
std::string ByteLevelEncode(std::string_view bytes);
// Characters outside the alphabet pass through as their own UTF-8.
std::string ByteLevelDecode(std::string_view text);

}  // namespace petrel::tok
