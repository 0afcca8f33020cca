// Encoding and decoding with llama.cpp's conventions for GGUF vocabularies.
#include "core/tokenizer/gguf_tokenizer.h"

#include <cstdlib>

#include "core/tokenizer/unicode.h"
#include "core/tokenizer/wordpiece.h"

namespace petrel::tok {

// llama.cpp's tokenizer_st_partition: each special token, longest first, splits every raw
// fragment at all of its occurrences. CONTROL and UNKNOWN tokens only take part when
// `parse_special`, and not inside `plain_spans`; USER_DEFINED ones always do (as Hugging Face
// matches added tokens).
std::vector<GgufTokenizer::Fragment> GgufTokenizer::Partition(
    std::string_view text, bool parse_special, const std::vector<TextSpan>& plain_spans) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({0, text.size(), -1});
  // One pass over the text finds which special texts occur at all; only those need a pass.
  std::vector<bool> occurs(n_special_texts_, false);
  for (size_t pos = 0; pos < text.size(); ++pos) {
    special_trie_.ForEachAt(text, pos, [&](int32_t number) { occurs[number] = true; });
  }
  for (size_t index = 0; index < specials_by_length_.size(); ++index) {
    const int32_t id = specials_by_length_[index];
    if (!occurs[special_text_[index]]) continue;
    const bool user_defined = vocab_.kinds[id] == TokenKind::kUserDefined;
    if (!parse_special && !user_defined) continue;
    const std::string& piece = vocab_.pieces[id];
    std::vector<Fragment> next;
    next.reserve(fragments.size());
    for (const Fragment& fragment : fragments) {
      if (fragment.token >= 0) {
        next.push_back(fragment);
        continue;
      }
      size_t start = fragment.begin;
      const std::string_view window = text.substr(0, fragment.end);
      for (size_t hit, from = start; (hit = window.find(piece, from)) != std::string_view::npos;) {
        if (!user_defined && OverlapsSpan(plain_spans, hit, hit + piece.size())) {
          from = hit + 1;
          continue;
        }
        from = hit + piece.size();
        if (hit > start) next.push_back({start, hit, -1});
        next.push_back({hit, hit + piece.size(), id});
        start = hit + piece.size();
      }
      if (start < fragment.end) next.push_back({start, fragment.end, -1});
    }
    fragments = std::move(next);
  }
  return fragments;
}

void GgufTokenizer::EncodeBpe(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<int32_t> symbols;
  for (const std::string_view word : SplitByRegexes(text, regexes_)) {
    const std::string encoded = ByteLevelEncode(word);
    if (ignore_merges_) {
      const int32_t whole = vocab_.Find(encoded);
      if (whole >= 0) {
        out->push_back(whole);
        continue;
      }
    }
    symbols.clear();
    for (size_t pos = 0; pos < encoded.size();) {
      const size_t length = Utf8CharLen(encoded, pos);
      symbols.push_back(vocab_.Find(std::string_view(encoded).substr(pos, length)));
      pos += length;
    }
    merges_.Apply(&symbols);
    // A character with no token (a vocab without the full byte alphabet) is dropped, as
    // llama.cpp drops bytes it cannot map.
    for (const int32_t id : symbols) {
      if (id >= 0) out->push_back(id);
    }
  }
}

void GgufTokenizer::EncodeWordPiece(std::string_view text, std::vector<int32_t>* out) const {
  BertNormalizeOptions options;
  const std::string normalized = BertNormalize(text, options);
  for (const std::string_view word : BertPreTokenize(normalized)) {
    WordPieceTokenize(word, vocab_, "\xE2\x96\x81", "", 100, unk_id_, out);
  }
}

std::vector<int32_t> GgufTokenizer::Encode(std::string_view text,
                                           const EncodeOptions& options) const {
  const std::string clean = SanitizeUtf8(text);
  const std::string_view view = clean;
  std::vector<int32_t> ids;
  const bool add_bos = options.add_special && add_bos_ && bos_id_ >= 0;
  if (add_bos) ids.push_back(bos_id_);
  bool previous_special = true;  // SPM: a raw fragment after a special token gets the ▁ prefix
  for (const Fragment& fragment : Partition(view, options.parse_special, options.plain_spans)) {
    if (fragment.token >= 0) {
      ids.push_back(fragment.token);
      previous_special = true;
      continue;
    }
    const std::string_view part = view.substr(fragment.begin, fragment.end - fragment.begin);
    switch (model_) {
      case GgufModel::kSpm: {
        std::string escaped = add_space_prefix_ && previous_special ? " " : "";
        escaped.append(part);
        std::string spm_text;
        for (const char c : escaped) {
          if (c == ' ') {
            spm_text.append("\xE2\x96\x81");
          } else {
            spm_text.push_back(c);
          }
        }
        SpmTokenize(spm_text, vocab_, mergeable_, joinable_, unk_id_, &ids);
        break;
      }
      case GgufModel::kBpe:
        EncodeBpe(part, &ids);
        break;
      case GgufModel::kWordPiece:
        EncodeWordPiece(part, &ids);
        break;
    }
    previous_special = false;
  }
  if (options.add_special && add_eos_ && eos_id_ >= 0) ids.push_back(eos_id_);
  if (options.add_special && add_sep_ && sep_id_ >= 0) ids.push_back(sep_id_);
  return ids;
}

std::string GgufTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string text;
  for (const int32_t id : ids) AppendTokenBytes(id, skip_special, &text);
  // SentencePiece's (and WordPiece's) word-start marker leaves one leading space to drop.
  if ((add_space_prefix_ || model_ == GgufModel::kWordPiece) && !text.empty() && text[0] == ' ') {
    text.erase(0, 1);
  }
  return SanitizeUtf8(text);
}

std::string GgufTokenizer::TokenBytes(int32_t id) const {
  std::string bytes;
  AppendTokenBytes(id, /*skip_special=*/true, &bytes);
  return bytes;
}

void GgufTokenizer::AppendTokenBytes(int32_t id, bool skip_special, std::string* out) const {
  if (!vocab_.Valid(id)) return;
  std::string& text = *out;
  const std::string& piece = vocab_.pieces[id];
  switch (vocab_.kinds[id]) {
    case TokenKind::kControl:
    case TokenKind::kUnknown:
      if (!skip_special) text.append(piece);
      break;
    case TokenKind::kUserDefined:
      text.append(piece);
      break;
    case TokenKind::kByte:
      if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0) {
        text.push_back(static_cast<char>(std::strtoul(piece.c_str() + 3, nullptr, 16)));
      } else {
        text.append(piece);
      }
      break;
    case TokenKind::kNormal:
    case TokenKind::kUnused:
    case TokenKind::kUndefined:
      if (model_ == GgufModel::kBpe) {
        text.append(ByteLevelDecode(piece));
      } else {
        for (size_t pos = 0; pos < piece.size();) {
          if (piece.compare(pos, 3, "\xE2\x96\x81") == 0) {
            text.push_back(' ');
            pos += 3;
          } else {
            text.push_back(piece[pos++]);
          }
        }
      }
      break;
  }
}

std::string_view GgufTokenizer::TokenText(int32_t id) const {
  return vocab_.Valid(id) ? std::string_view(vocab_.pieces[id]) : std::string_view();
}

bool GgufTokenizer::IsSpecial(int32_t id) const {
  return vocab_.Valid(id) &&
         (vocab_.kinds[id] == TokenKind::kControl || vocab_.kinds[id] == TokenKind::kUnknown);
}

}  // namespace petrel::tok
