// BERT normalization, pre-tokenization and greedy WordPiece.
#include "core/tokenizer/wordpiece.h"

#include "core/tokenizer/unicode.h"

namespace petrel::tok {

std::string BertNormalize(std::string_view text, const BertNormalizeOptions& options) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t cpt = DecodeUtf8(text, &pos);
    if (options.clean_text) {
      const bool is_space = cpt == '\t' || cpt == '\n' || cpt == '\r' || IsWhitespace(cpt);
      if (is_space) {
        out.push_back(' ');
        continue;
      }
      if (cpt == 0 || cpt == kReplacementChar || IsOther(cpt)) continue;
    }
    if (options.handle_chinese_chars && IsChineseChar(cpt)) {
      out.push_back(' ');
      AppendUtf8(cpt, &out);
      out.push_back(' ');
      continue;
    }
    AppendUtf8(cpt, &out);
  }
  if (options.strip_accents) out = StripAccents(out);
  if (options.lowercase) out = Lowercase(out);
  return out;
}

std::vector<std::string_view> BertPreTokenize(std::string_view text) {
  std::vector<std::string_view> words;
  size_t word_start = std::string_view::npos;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const uint32_t cpt = DecodeUtf8(text, &pos);
    const bool is_punct =
        (cpt < 0x80 && (IsPunctuation(cpt) || IsSymbol(cpt))) || IsPunctuation(cpt);
    if (IsWhitespace(cpt) || is_punct) {
      if (word_start != std::string_view::npos) {
        words.push_back(text.substr(word_start, start - word_start));
        word_start = std::string_view::npos;
      }
      if (is_punct) words.push_back(text.substr(start, pos - start));
    } else if (word_start == std::string_view::npos) {
      word_start = start;
    }
  }
  if (word_start != std::string_view::npos) words.push_back(text.substr(word_start));
  return words;
}

void WordPieceTokenize(std::string_view word, const Vocab& vocab, std::string_view word_prefix,
                       std::string_view continuation_prefix, size_t max_chars_per_word,
                       int32_t unk_id, std::vector<int32_t>* out) {
  if (word.empty()) return;
  size_t n_chars = 0;
  for (size_t pos = 0; pos < word.size(); pos += Utf8CharLen(word, pos)) ++n_chars;
  const size_t first_output = out->size();
  bool covered = n_chars <= max_chars_per_word;
  std::string candidate;
  for (size_t start = 0; covered && start < word.size();) {
    // Character boundaries from `start`, so that every candidate ends on one.
    std::vector<size_t> ends;
    for (size_t pos = start; pos < word.size();) {
      pos += Utf8CharLen(word, pos);
      ends.push_back(pos);
    }
    int32_t found = -1;
    size_t found_end = start;
    for (auto it = ends.rbegin(); it != ends.rend(); ++it) {
      candidate.assign(start == 0 ? word_prefix : continuation_prefix);
      candidate.append(word.substr(start, *it - start));
      const int32_t id = vocab.Find(candidate);
      if (id >= 0) {
        found = id;
        found_end = *it;
        break;
      }
    }
    if (found < 0) {
      covered = false;
      break;
    }
    out->push_back(found);
    start = found_end;
  }
  if (!covered) {
    out->resize(first_output);
    if (unk_id >= 0) out->push_back(unk_id);
  }
}

}  // namespace petrel::tok
