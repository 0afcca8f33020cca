// UTF-8 decoding policy, character classes, normalization and the GPT-2 byte alphabet.
#include "core/tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

namespace petrel::tok {

uint32_t DecodeUtf8(std::string_view text, size_t* pos) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const size_t size = text.size();
  const size_t start = *pos;
  const uint8_t lead = bytes[start];
  *pos = start + 1;
  if (lead < 0x80) return lead;
  size_t extra;
  uint32_t cpt;
  uint32_t min_cpt;
  if ((lead & 0xE0) == 0xC0) {
    extra = 1, cpt = lead & 0x1F, min_cpt = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    extra = 2, cpt = lead & 0x0F, min_cpt = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    extra = 3, cpt = lead & 0x07, min_cpt = 0x10000;
  } else {
    return kReplacementChar;
  }
  if (start + extra >= size) return kReplacementChar;
  for (size_t i = 1; i <= extra; ++i) {
    const uint8_t next = bytes[start + i];
    if ((next & 0xC0) != 0x80) return kReplacementChar;
    cpt = (cpt << 6) | (next & 0x3F);
  }
  if (cpt < min_cpt || cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) return kReplacementChar;
  *pos = start + 1 + extra;
  return cpt;
}

size_t FirstInvalidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    // U+FFFD written in the text is valid: only a one-byte step over a non-ASCII byte is not.
    DecodeUtf8(text, &pos);
    if (pos == start + 1 && static_cast<uint8_t>(text[start]) >= 0x80) return start;
  }
  return std::string_view::npos;
}

size_t Utf8CharLen(std::string_view text, size_t pos) {
  size_t next = pos;
  DecodeUtf8(text, &next);
  return next - pos;
}

void AppendUtf8(uint32_t cpt, std::string* out) {
  if (cpt < 0x80) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const uint32_t cpt = DecodeUtf8(text, &pos);
    if (cpt == kReplacementChar && pos - start == 1) {
      AppendUtf8(kReplacementChar, &out);
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

size_t IncompleteUtf8Tail(std::string_view text) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto byte = static_cast<uint8_t>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead
    size_t need = 0;
    if ((byte & 0xE0) == 0xC0)
      need = 2;
    else if ((byte & 0xF0) == 0xE0)
      need = 3;
    else if ((byte & 0xF8) == 0xF0)
      need = 4;
    return need > back ? back : 0;
  }
  return 0;
}

std::vector<uint32_t> ToCodepoints(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) cpts.push_back(DecodeUtf8(text, &pos));
  return cpts;
}

namespace {

utf8proc_category_t Category(uint32_t cpt) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cpt));
}

}  // namespace

bool IsLetter(uint32_t cpt) {
  const auto cat = Category(cpt);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
bool IsNumber(uint32_t cpt) {
  const auto cat = Category(cpt);
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}
bool IsPunctuation(uint32_t cpt) {
  const auto cat = Category(cpt);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}
bool IsSymbol(uint32_t cpt) {
  const auto cat = Category(cpt);
  return cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO;
}
bool IsNonSpacingMark(uint32_t cpt) { return Category(cpt) == UTF8PROC_CATEGORY_MN; }
bool IsOther(uint32_t cpt) {
  const auto cat = Category(cpt);
  return cat == UTF8PROC_CATEGORY_CN ||
         (cat >= UTF8PROC_CATEGORY_CC && cat <= UTF8PROC_CATEGORY_CO);
}

bool IsWhitespace(uint32_t cpt) {
  return (cpt >= 0x09 && cpt <= 0x0D) || cpt == 0x20 || cpt == 0x85 || cpt == 0xA0 ||
         cpt == 0x1680 || (cpt >= 0x2000 && cpt <= 0x200A) || cpt == 0x2028 || cpt == 0x2029 ||
         cpt == 0x202F || cpt == 0x205F || cpt == 0x3000;
}

bool IsChineseChar(uint32_t cpt) {
  return (cpt >= 0x4E00 && cpt <= 0x9FFF) || (cpt >= 0x3400 && cpt <= 0x4DBF) ||
         (cpt >= 0x20000 && cpt <= 0x2A6DF) || (cpt >= 0x2A700 && cpt <= 0x2B73F) ||
         (cpt >= 0x2B740 && cpt <= 0x2B81F) || (cpt >= 0x2B920 && cpt <= 0x2CEAF) ||
         (cpt >= 0xF900 && cpt <= 0xFAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
}

uint32_t ToLower(uint32_t cpt) {
  return static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cpt)));
}

std::string Normalize(std::string_view text, NormForm form) {
  if (text.empty()) return {};
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t size = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                             static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                             static_cast<utf8proc_option_t>(options));
  if (size < 0) return std::string(text);  // invalid input: leave it as it is
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(size));
  std::free(mapped);
  return out;
}

std::string Lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) AppendUtf8(ToLower(DecodeUtf8(text, &pos)), &out);
  return out;
}

std::string StripAccents(std::string_view text) {
  const std::string nfd = Normalize(text, NormForm::kNfd);
  std::string out;
  out.reserve(nfd.size());
  size_t pos = 0;
  while (pos < nfd.size()) {
    const uint32_t cpt = DecodeUtf8(nfd, &pos);
    if (!IsNonSpacingMark(cpt)) AppendUtf8(cpt, &out);
  }
  return out;
}

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 onwards in byte order.
struct ByteTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> cpt_to_byte;  // code points < 324 cover the whole alphabet
  ByteTables() {
    cpt_to_byte.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) ||
                             (byte >= 0xAE && byte <= 0xFF);
      const uint32_t cpt = printable ? byte : next_extra++;
      AppendUtf8(cpt, &byte_to_utf8[byte]);
      cpt_to_byte[cpt] = static_cast<int16_t>(byte);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

std::string_view ByteToUnicode(uint8_t byte) { return Tables().byte_to_utf8[byte]; }

int UnicodeToByte(uint32_t cpt) {
  return cpt < Tables().cpt_to_byte.size() ? Tables().cpt_to_byte[cpt] : -1;
}

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out.append(ByteToUnicode(static_cast<uint8_t>(c)));
  return out;
}

std::string ByteLevelDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const int byte = UnicodeToByte(DecodeUtf8(text, &pos));
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

}  // namespace petrel::tok
