// Running a Hugging Face tokenizer.json pipeline: encode (added tokens, normalize, pre-tokenize,
// model, post-process) and decode (the decoder chain), as the `tokenizers` library does.
#include "core/tokenizer/hf_tokenizer.h"

#include <algorithm>

#include "core/tokenizer/unicode.h"

namespace petrel::tok {
namespace {

void ReplaceAll(std::string* text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text->find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(*text, pos, hit - pos);
    out.append(to);
  }
  out.append(*text, pos, std::string::npos);
  *text = std::move(out);
}

// transformers' clean_up_tokenization.
void CleanUpSpaces(std::string* text) {
  static const char* const kPairs[][2] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& pair : kPairs) ReplaceAll(text, pair[0], pair[1]);
}

bool IsWordChar(uint32_t cpt) { return IsLetter(cpt) || IsNumber(cpt) || cpt == '_'; }

// Whitespace run lengths used by lstrip / rstrip.
size_t SpacesBefore(std::string_view text, size_t end) {
  size_t begin = end;
  while (begin > 0 && IsWhitespace(static_cast<uint8_t>(text[begin - 1])) &&
         static_cast<uint8_t>(text[begin - 1]) < 0x80) {
    --begin;
  }
  return end - begin;
}
size_t SpacesAfter(std::string_view text, size_t begin) {
  size_t end = begin;
  while (end < text.size() && static_cast<uint8_t>(text[end]) < 0x80 &&
         IsWhitespace(static_cast<uint8_t>(text[end]))) {
    ++end;
  }
  return end - begin;
}

uint32_t LastChar(std::string_view text) {
  size_t start = text.size();
  while (start > 0 && (static_cast<uint8_t>(text[start - 1]) & 0xC0) == 0x80) --start;
  if (start > 0) --start;
  size_t pos = start;
  return text.empty() ? 0 : DecodeUtf8(text, &pos);
}

}  // namespace

std::vector<HfTokenizer::Segment> HfTokenizer::SplitAdded(
    std::string_view text, const TokenTrie& trie, const std::vector<TextSpan>& plain_spans) const {
  std::vector<Segment> segments;
  size_t text_start = 0;  // start of the pending plain text
  size_t pos = 0;
  while (pos < text.size() && !trie.empty()) {
    size_t length = 0;
    const int32_t index = trie.LongestAt(text, pos, &length);
    if (index < 0) {
      pos += Utf8CharLen(text, pos);
      continue;
    }
    const HfAddedToken& token = added_[index];
    if (special_[token.id] && OverlapsSpan(plain_spans, pos, pos + length)) {
      pos += Utf8CharLen(text, pos);
      continue;
    }
    size_t begin = pos;
    size_t end = pos + length;
    if (token.single_word) {
      size_t after = end;
      const bool word_before = begin > 0 && IsWordChar(LastChar(text.substr(0, begin)));
      const bool word_after = end < text.size() && IsWordChar(DecodeUtf8(text, &after));
      if (word_before || word_after) {
        pos = end;  // the match is consumed but discarded, as aho-corasick's iterator does
        continue;
      }
    }
    if (token.lstrip) begin = std::max(begin - SpacesBefore(text, begin), text_start);
    if (token.rstrip) end += SpacesAfter(text, end);
    if (begin > text_start) segments.push_back({text_start, begin, -1});
    segments.push_back({begin, end, token.id});
    text_start = pos = end;
  }
  if (text_start < text.size()) segments.push_back({text_start, text.size(), -1});
  return segments;
}

std::string HfTokenizer::Normalize(std::string_view text) const {
  std::string out(text);
  for (const HfNormalizer& step : normalizers_) {
    switch (step.kind) {
      case HfNormalizerKind::kPrepend:
        if (!out.empty()) out.insert(0, step.pattern);
        break;
      case HfNormalizerKind::kReplace:
        if (step.regex) {
          out = step.regex->ReplaceAll(out, step.content);
        } else {
          ReplaceAll(&out, step.pattern, step.content);
        }
        break;
      case HfNormalizerKind::kNfc:
        out = tok::Normalize(out, NormForm::kNfc);
        break;
      case HfNormalizerKind::kNfd:
        out = tok::Normalize(out, NormForm::kNfd);
        break;
      case HfNormalizerKind::kNfkc:
        out = tok::Normalize(out, NormForm::kNfkc);
        break;
      case HfNormalizerKind::kNfkd:
        out = tok::Normalize(out, NormForm::kNfkd);
        break;
      case HfNormalizerKind::kLowercase:
        out = Lowercase(out);
        break;
      case HfNormalizerKind::kStripAccents:
        out = StripAccents(out);
        break;
      case HfNormalizerKind::kStrip: {
        const std::vector<uint32_t> cpts = ToCodepoints(out);
        size_t first = 0, last = cpts.size();
        while (step.strip_left && first < last && IsWhitespace(cpts[first])) ++first;
        while (step.strip_right && last > first && IsWhitespace(cpts[last - 1])) --last;
        std::string stripped;
        for (size_t i = first; i < last; ++i) AppendUtf8(cpts[i], &stripped);
        out = std::move(stripped);
        break;
      }
      case HfNormalizerKind::kBert:
        out = BertNormalize(out, step.bert);
        break;
    }
  }
  return out;
}

std::vector<std::string> HfTokenizer::PreTokenize(std::string_view text, bool at_start) const {
  std::vector<std::string> pieces{std::string(text)};
  for (const HfPreTokenizer& step : pre_tokenizers_) {
    std::vector<std::string> next;
    for (size_t index = 0; index < pieces.size(); ++index) {
      std::string piece = std::move(pieces[index]);
      const bool piece_at_start = at_start && index == 0;
      auto add_splits = [&](const std::string& source, const std::vector<Span>& spans) {
        for (const auto& [begin, end] : ApplySplitBehavior(spans, step.behavior, step.invert)) {
          next.push_back(source.substr(begin, end - begin));
        }
      };
      switch (step.kind) {
        case HfPreTokenizerKind::kByteLevel: {
          if (step.add_prefix_space && (piece.empty() || piece[0] != ' '))
            piece.insert(piece.begin(), ' ');
          if (!step.regex) {
            next.push_back(ByteLevelEncode(piece));
            break;
          }
          for (const Span& span : step.regex->Split(piece)) {
            next.push_back(ByteLevelEncode(piece.substr(span.begin, span.end - span.begin)));
          }
          break;
        }
        case HfPreTokenizerKind::kMetaspace: {
          ReplaceAll(&piece, " ", step.replacement);
          const bool starts = piece.compare(0, step.replacement.size(), step.replacement) == 0;
          const bool prepend = step.prepend_scheme == PrependScheme::kAlways ||
                               (step.prepend_scheme == PrependScheme::kFirst && piece_at_start);
          if (prepend && !starts) piece.insert(0, step.replacement);
          if (!step.split) {
            next.push_back(std::move(piece));
            break;
          }
          std::vector<Span> spans;
          size_t gap = 0;
          for (size_t hit; (hit = piece.find(step.replacement, gap)) != std::string::npos;) {
            if (hit > gap) spans.push_back({gap, hit, false});
            spans.push_back({hit, hit + step.replacement.size(), true});
            gap = hit + step.replacement.size();
          }
          if (gap < piece.size()) spans.push_back({gap, piece.size(), false});
          for (const auto& [begin, end] :
               ApplySplitBehavior(spans, SplitBehavior::kMergedWithNext, false)) {
            next.push_back(piece.substr(begin, end - begin));
          }
          break;
        }
        case HfPreTokenizerKind::kSplit:
          add_splits(piece, step.regex->Split(piece));
          break;
        case HfPreTokenizerKind::kBert:
          for (const std::string_view word : BertPreTokenize(piece)) next.emplace_back(word);
          break;
        case HfPreTokenizerKind::kWhitespaceSplit: {
          std::vector<Span> spans;
          size_t pos = 0;
          while (pos < piece.size()) {
            const size_t start = pos;
            const bool space = IsWhitespace(DecodeUtf8(piece, &pos));
            if (!spans.empty() && spans.back().matched == space) {
              spans.back().end = pos;
            } else {
              spans.push_back({start, pos, space});
            }
          }
          for (const Span& span : spans) {
            if (!span.matched) next.push_back(piece.substr(span.begin, span.end - span.begin));
          }
          break;
        }
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

void HfTokenizer::BpeTokenize(std::string_view piece, std::vector<int32_t>* out) const {
  if (model_.ignore_merges) {
    const int32_t whole = vocab_.Find(piece);
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  std::vector<int32_t> symbols;
  // Where `symbols` splits into parts that merge independently: before a character whose pair
  // with the previous one occurs in no merge result (see CharPairSet). Characters that became
  // byte or unknown tokens never start a part.
  std::vector<size_t> part_starts{0};
  uint32_t previous = 0;
  bool previous_plain = false;
  bool pending_unk = false;
  std::string key;
  for (size_t pos = 0; pos < piece.size();) {
    const size_t start = pos;
    const uint32_t cpt = DecodeUtf8(piece, &pos);
    key.clear();
    if (start > 0) key.append(model_.continuing_subword_prefix);
    key.append(piece.substr(start, pos - start));
    if (pos == piece.size()) key.append(model_.end_of_word_suffix);
    const int32_t id = vocab_.Find(key);
    if (id >= 0) {
      if (pending_unk) symbols.push_back(model_.unk_id);
      pending_unk = false;
      const bool plain = !(cpt == kReplacementChar && pos - start == 1);
      if (previous_plain && plain && !model_.joinable.Contains(previous, cpt)) {
        part_starts.push_back(symbols.size());
      }
      symbols.push_back(id);
      previous = cpt;
      previous_plain = plain;
      continue;
    }
    previous_plain = false;
    if (model_.byte_fallback) {
      bool all_bytes = true;
      for (const char c : key) all_bytes &= vocab_.byte_ids[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (const char c : key) symbols.push_back(vocab_.byte_ids[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (model_.unk_id < 0) continue;  // HF would fail; dropping the character is the safe choice
    if (pending_unk && !model_.fuse_unk) symbols.push_back(model_.unk_id);
    pending_unk = true;
  }
  if (pending_unk) symbols.push_back(model_.unk_id);
  if (part_starts.size() == 1) {
    model_.merges.Apply(&symbols);
    out->insert(out->end(), symbols.begin(), symbols.end());
    return;
  }
  part_starts.push_back(symbols.size());
  std::vector<int32_t> part;
  for (size_t i = 0; i + 1 < part_starts.size(); ++i) {
    part.assign(symbols.begin() + static_cast<std::ptrdiff_t>(part_starts[i]),
                symbols.begin() + static_cast<std::ptrdiff_t>(part_starts[i + 1]));
    model_.merges.Apply(&part);
    out->insert(out->end(), part.begin(), part.end());
  }
}

void HfTokenizer::ModelTokenize(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  switch (model_.kind) {
    case HfModelKind::kBpe:
      BpeTokenize(piece, out);
      break;
    case HfModelKind::kWordPiece:
      WordPieceTokenize(piece, vocab_, "", model_.continuing_subword_prefix,
                        model_.max_input_chars_per_word, model_.unk_id, out);
      break;
    case HfModelKind::kWordLevel: {
      const int32_t id = vocab_.Find(piece);
      if (id >= 0 || model_.unk_id >= 0) out->push_back(id >= 0 ? id : model_.unk_id);
      break;
    }
  }
}

std::vector<int32_t> HfTokenizer::Encode(std::string_view text,
                                         const EncodeOptions& options) const {
  const std::string clean = SanitizeUtf8(text);
  std::vector<int32_t> ids;
  if (options.add_special) ids = post_prefix_;
  for (const Segment& raw : SplitAdded(clean, raw_trie_, options.plain_spans)) {
    if (raw.token >= 0) {
      ids.push_back(raw.token);
      continue;
    }
    const std::string_view raw_text =
        std::string_view(clean).substr(raw.begin, raw.end - raw.begin);
    const std::string normalized = Normalize(raw_text);
    // Plain spans in normalized offsets: where the normalized text of the segment's part before
    // each end of the span ends (normalizers map text in order).
    std::vector<TextSpan> normalized_spans;
    for (const TextSpan& span : options.plain_spans) {
      if (span.end <= raw.begin || span.begin >= raw.end) continue;
      const size_t begin = std::max(span.begin, raw.begin) - raw.begin;
      const size_t end = std::min(span.end, raw.end) - raw.begin;
      normalized_spans.push_back({begin == 0 ? 0 : Normalize(raw_text.substr(0, begin)).size(),
                                  Normalize(raw_text.substr(0, end)).size()});
    }
    for (const Segment& part : SplitAdded(normalized, normalized_trie_, normalized_spans)) {
      if (part.token >= 0) {
        ids.push_back(part.token);
        continue;
      }
      const std::string_view text_part =
          std::string_view(normalized).substr(part.begin, part.end - part.begin);
      for (const std::string& piece : PreTokenize(text_part, raw.begin == 0 && part.begin == 0)) {
        ModelTokenize(piece, &ids);
      }
    }
  }
  if (options.add_special) ids.insert(ids.end(), post_suffix_.begin(), post_suffix_.end());
  return ids;
}

std::string HfTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (!vocab_.Valid(id) || (skip_special && special_[id])) continue;
    tokens.push_back(vocab_.pieces[id]);
  }
  if (!has_decoder_) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i != 0) joined.push_back(' ');
      joined.append(tokens[i]);
    }
    tokens = {joined};
  }
  for (const HfDecoder& step : decoders_) {
    switch (step.kind) {
      case HfDecoderKind::kReplace:
        for (std::string& token : tokens) {
          if (step.regex) {
            token = step.regex->ReplaceAll(token, step.content);
          } else {
            ReplaceAll(&token, step.pattern, step.content);
          }
        }
        break;
      case HfDecoderKind::kByteFallback: {
        std::vector<std::string> out;
        std::string bytes;
        size_t n_byte_tokens = 0;
        auto flush = [&] {
          if (n_byte_tokens == 0) return;
          if (SanitizeUtf8(bytes) == bytes) {
            out.push_back(bytes);
          } else {
            for (size_t i = 0; i < n_byte_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
          }
          bytes.clear();
          n_byte_tokens = 0;
        };
        for (std::string& token : tokens) {
          unsigned value = 0;
          if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
              std::sscanf(token.c_str() + 3, "%2X", &value) == 1) {
            bytes.push_back(static_cast<char>(value));
            ++n_byte_tokens;
          } else {
            flush();
            out.push_back(std::move(token));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case HfDecoderKind::kFuse: {
        std::string joined;
        for (const std::string& token : tokens) joined += token;
        tokens = {joined};
        break;
      }
      case HfDecoderKind::kStrip:
        for (std::string& token : tokens) {
          size_t first = 0;
          while (first < step.strip_start &&
                 token.compare(first * step.pattern.size(), step.pattern.size(), step.pattern) ==
                     0) {
            ++first;
          }
          token.erase(0, first * step.pattern.size());
          for (size_t n = 0; n < step.strip_stop && token.size() >= step.pattern.size() &&
                             token.compare(token.size() - step.pattern.size(), step.pattern.size(),
                                           step.pattern) == 0;
               ++n) {
            token.resize(token.size() - step.pattern.size());
          }
        }
        break;
      case HfDecoderKind::kByteLevel: {
        std::string joined;
        for (const std::string& token : tokens) joined += ByteLevelDecode(token);
        tokens = {joined};
        break;
      }
      case HfDecoderKind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          ReplaceAll(&tokens[i], step.pattern, i == 0 && step.prepend ? "" : " ");
        }
        break;
      case HfDecoderKind::kWordPiece:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& token = tokens[i];
          if (i != 0) {
            if (token.compare(0, step.pattern.size(), step.pattern) == 0) {
              token.erase(0, step.pattern.size());
            } else {
              token.insert(token.begin(), ' ');
            }
          }
          if (step.cleanup) CleanUpSpaces(&token);
        }
        break;
      case HfDecoderKind::kBpeSuffix:
        for (size_t i = 0; i < tokens.size(); ++i) {
          ReplaceAll(&tokens[i], step.pattern, i + 1 == tokens.size() ? "" : " ");
        }
        break;
    }
  }
  std::string text;
  for (const std::string& token : tokens) text += token;
  if (clean_up_spaces_) CleanUpSpaces(&text);
  return SanitizeUtf8(text);
}

// The decoder pipeline applied to one token as if it stood in the middle of the text: the
// steps that treat the first or last token specially (Strip, Metaspace's dropped prefix,
// WordPiece's missing space, BPE suffixes) take their middle-of-text form.
std::string HfTokenizer::TokenBytes(int32_t id) const {
  if (!vocab_.Valid(id) || special_[id]) return {};
  std::string token = vocab_.pieces[id];
  if (!has_decoder_) return token;
  for (const HfDecoder& step : decoders_) {
    switch (step.kind) {
      case HfDecoderKind::kReplace:
        if (step.regex) {
          token = step.regex->ReplaceAll(token, step.content);
        } else {
          ReplaceAll(&token, step.pattern, step.content);
        }
        break;
      case HfDecoderKind::kByteFallback: {
        unsigned value = 0;
        if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
            std::sscanf(token.c_str() + 3, "%2X", &value) == 1) {
          token = std::string(1, static_cast<char>(value));
        }
        break;
      }
      case HfDecoderKind::kFuse:
      case HfDecoderKind::kStrip:
        break;
      case HfDecoderKind::kByteLevel:
        token = ByteLevelDecode(token);
        break;
      case HfDecoderKind::kMetaspace:
        ReplaceAll(&token, step.pattern, " ");
        break;
      case HfDecoderKind::kWordPiece:
        if (token.compare(0, step.pattern.size(), step.pattern) == 0) {
          token.erase(0, step.pattern.size());
        } else {
          token.insert(token.begin(), ' ');
        }
        break;
      case HfDecoderKind::kBpeSuffix:
        ReplaceAll(&token, step.pattern, " ");
        break;
    }
  }
  return token;
}

std::string_view HfTokenizer::TokenText(int32_t id) const {
  return vocab_.Valid(id) ? std::string_view(vocab_.pieces[id]) : std::string_view();
}

bool HfTokenizer::IsSpecial(int32_t id) const { return vocab_.Valid(id) && special_[id]; }

}  // namespace petrel::tok
