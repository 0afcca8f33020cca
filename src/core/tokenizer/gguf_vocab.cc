// Building a GgufTokenizer from `tokenizer.ggml.*` metadata, with llama.cpp's defaults.
#include <algorithm>
#include <cstdio>

#include "core/format/gguf.h"
#include "core/tokenizer/gguf_tokenizer.h"
#include "core/tokenizer/unicode.h"

namespace petrel {
namespace tok {
namespace {

// Reads an optional token-id key; absent or out of range leaves `*id` unchanged.
Status ReadId(const GgufFile& file, const char* key, size_t n_vocab, int32_t* id) {
  if (file.Find(key) == nullptr) return Status::Ok();
  PETREL_ASSIGN_OR_RETURN(const uint64_t value, file.GetUint(key));
  if (value < n_vocab) *id = static_cast<int32_t>(value);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& file) {
  auto tokenizer = std::unique_ptr<GgufTokenizer>(new GgufTokenizer());
  GgufTokenizer& tok = *tokenizer;
  PETREL_ASSIGN_OR_RETURN(const std::string_view model, file.GetString("tokenizer.ggml.model"));
  PETREL_ASSIGN_OR_RETURN(const GgufValue* tokens,
                          file.GetArray("tokenizer.ggml.tokens", GgufType::kString));
  const size_t n_vocab = tokens->strings.size();
  if (n_vocab == 0 || n_vocab > (1u << 24)) return Error("tokenizer.ggml.tokens: bad size");
  const GgufValue* scores = file.Find("tokenizer.ggml.scores");
  if (scores && (scores->type != GgufType::kArray || scores->count != n_vocab)) {
    return Error("tokenizer.ggml.scores: expected %zu numbers", n_vocab);
  }
  const GgufValue* types = file.Find("tokenizer.ggml.token_type");
  if (types && (types->type != GgufType::kArray || types->count != n_vocab)) {
    return Error("tokenizer.ggml.token_type: expected %zu integers", n_vocab);
  }
  for (size_t id = 0; id < n_vocab; ++id) {
    TokenKind kind = TokenKind::kNormal;
    if (types) {
      const int64_t type = types->IntAt(id);
      kind = type >= 1 && type <= 6 ? static_cast<TokenKind>(type) : TokenKind::kUndefined;
    }
    const float score = scores ? static_cast<float>(scores->FloatAt(id)) : 0.0f;
    tok.vocab_.Set(static_cast<int32_t>(id), std::string(tokens->strings[id]), kind, score);
  }

  // Defaults per model, as llama.cpp's llama_vocab::impl::load sets them.
  if (model == "llama") {
    tok.model_ = GgufModel::kSpm;
    tok.bos_id_ = 1, tok.eos_id_ = 2, tok.unk_id_ = 0;
    tok.add_space_prefix_ = true, tok.add_bos_ = true;
  } else if (model == "gpt2") {
    tok.model_ = GgufModel::kBpe;
    tok.bos_id_ = 11, tok.eos_id_ = 11;
    PETREL_ASSIGN_OR_RETURN(const std::string_view pre,
                            file.GetStringOr("tokenizer.ggml.pre", "default"));
    const PreTokenizerPreset preset = FindPreTokenizerPreset(pre);
    if (!preset.known) {
      std::fprintf(stderr,
                   "petrel: warning: unknown tokenizer.ggml.pre '%.*s'; using the GPT-2 regex\n",
                   static_cast<int>(pre.size()), pre.data());
    }
    tok.ignore_merges_ = preset.ignore_merges;
    tok.add_bos_ = preset.add_bos;
    for (const char* pattern : preset.patterns) {
      PETREL_ASSIGN_OR_RETURN(auto regex, Regex::Compile(pattern));
      tok.regexes_.push_back(std::move(regex));
    }
    PETREL_ASSIGN_OR_RETURN(const GgufValue* merges,
                            file.GetArray("tokenizer.ggml.merges", GgufType::kString));
    size_t n_skipped = 0;
    for (size_t rank = 0; rank < merges->strings.size(); ++rank) {
      const std::string_view merge = merges->strings[rank];
      const size_t space = merge.find(' ', 1);
      const int32_t left =
          space == std::string_view::npos ? -1 : tok.vocab_.Find(merge.substr(0, space));
      const int32_t right = left < 0 ? -1 : tok.vocab_.Find(merge.substr(space + 1));
      std::string merged(merge.substr(0, space == std::string_view::npos ? 0 : space));
      if (right >= 0) merged.append(merge.substr(space + 1));
      const int32_t result = right < 0 ? -1 : tok.vocab_.Find(merged);
      if (result < 0) {
        ++n_skipped;
        continue;
      }
      tok.merges_.Add(left, right, static_cast<int32_t>(rank), result);
    }
    if (n_skipped) {
      std::fprintf(stderr, "petrel: warning: %zu BPE merges name tokens not in the vocab\n",
                   n_skipped);
    }
  } else if (model == "bert") {
    tok.model_ = GgufModel::kWordPiece;
    tok.bos_id_ = 101, tok.unk_id_ = 100, tok.sep_id_ = 102;
    tok.add_bos_ = true, tok.add_sep_ = true;
    PETREL_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.cls_token_id", n_vocab, &tok.bos_id_));
  } else {
    return Error("tokenizer.ggml.model '%.*s' is not supported", static_cast<int>(model.size()),
                 model.data());
  }

  PETREL_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.bos_token_id", n_vocab, &tok.bos_id_));
  PETREL_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.eos_token_id", n_vocab, &tok.eos_id_));
  PETREL_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.unknown_token_id", n_vocab, &tok.unk_id_));
  PETREL_RETURN_IF_ERROR(ReadId(file, "tokenizer.ggml.seperator_token_id", n_vocab, &tok.sep_id_));
  PETREL_ASSIGN_OR_RETURN(tok.add_bos_,
                          file.GetBoolOr("tokenizer.ggml.add_bos_token", tok.add_bos_));
  PETREL_ASSIGN_OR_RETURN(tok.add_eos_,
                          file.GetBoolOr("tokenizer.ggml.add_eos_token", tok.add_eos_));
  PETREL_ASSIGN_OR_RETURN(tok.add_sep_,
                          file.GetBoolOr("tokenizer.ggml.add_sep_token", tok.add_sep_));
  PETREL_ASSIGN_OR_RETURN(tok.add_space_prefix_,
                          file.GetBoolOr("tokenizer.ggml.add_space_prefix", tok.add_space_prefix_));
  if (!tok.vocab_.Valid(tok.bos_id_)) tok.bos_id_ = -1;
  if (!tok.vocab_.Valid(tok.eos_id_)) tok.eos_id_ = -1;
  if (!tok.vocab_.Valid(tok.unk_id_)) tok.unk_id_ = -1;
  if (!tok.vocab_.Valid(tok.sep_id_)) tok.sep_id_ = -1;

  // End of generation: eos, eot, eom, and control tokens llama.cpp recognises by their text.
  if (tok.eos_id_ >= 0) tok.eog_ids_.insert(tok.eos_id_);
  int32_t extra_id = -1;
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    extra_id = -1;
    PETREL_RETURN_IF_ERROR(ReadId(file, key, n_vocab, &extra_id));
    if (extra_id >= 0) tok.eog_ids_.insert(extra_id);
  }
  static const char* const kEndTexts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",        "<|endoftext|>",
      "<|eom_id|>", "<EOT>",      "<|end_of_text|>", "<｜end▁of▁sentence｜>"};
  for (const char* text : kEndTexts) {
    const int32_t id = tok.vocab_.Find(text);
    if (id >= 0 && tok.vocab_.kinds[id] == TokenKind::kControl) tok.eog_ids_.insert(id);
  }

  // SentencePiece merges only produce ordinary pieces, never control or byte tokens, so that
  // "<s>" typed by a user cannot merge into the real BOS.
  tok.mergeable_.resize(n_vocab);
  for (size_t id = 0; id < n_vocab; ++id) {
    const TokenKind kind = tok.vocab_.kinds[id];
    tok.mergeable_[id] = kind == TokenKind::kNormal || kind == TokenKind::kUserDefined ||
                         kind == TokenKind::kUndefined;
    if (tok.model_ == GgufModel::kSpm && tok.mergeable_[id]) {
      tok.joinable_.AddPiece(tok.vocab_.pieces[id]);
    }
    const bool partition = kind == TokenKind::kControl || kind == TokenKind::kUserDefined ||
                           kind == TokenKind::kUnknown;
    const std::string& piece = tok.vocab_.pieces[id];
    if (partition && !piece.empty() && SanitizeUtf8(piece) == piece) {
      tok.specials_by_length_.push_back(static_cast<int32_t>(id));
    }
  }
  std::stable_sort(tok.specials_by_length_.begin(), tok.specials_by_length_.end(),
                   [&](int32_t a, int32_t b) {
                     return tok.vocab_.pieces[a].size() > tok.vocab_.pieces[b].size();
                   });
  StringMap<int32_t> text_numbers;
  for (const int32_t id : tok.specials_by_length_) {
    const std::string& piece = tok.vocab_.pieces[id];
    const auto [it, inserted] =
        text_numbers.emplace(piece, static_cast<int32_t>(tok.n_special_texts_));
    if (inserted) {
      tok.special_trie_.Add(piece, it->second);
      ++tok.n_special_texts_;
    }
    tok.special_text_.push_back(it->second);
  }
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace tok

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  // Files converted from a Hugging Face folder may carry the tokenizer.json itself instead of
  // `tokenizer.ggml.*` keys; it is then read exactly as the folder's would be.
  const GgufValue* hf_json = file.Find("tokenizer.huggingface.json");
  if (!file.Find("tokenizer.ggml.model") && hf_json && hf_json->type == GgufType::kString) {
    auto text = [&](const char* key) -> std::string_view {
      const GgufValue* value = file.Find(key);
      return value && value->type == GgufType::kString ? value->str : std::string_view();
    };
    auto tokenizer = FromHfJson(hf_json->str, text("tokenizer.huggingface.config"),
                                text("tokenizer.huggingface.generation_config"));
    if (!tokenizer.ok()) return tokenizer.status().Wrap(file.path() + ": tokenizer.huggingface.json");
    return tokenizer;
  }
  auto tokenizer = tok::LoadGgufTokenizer(file);
  if (!tokenizer.ok()) return tokenizer.status().Wrap(file.path());
  return tokenizer;
}

}  // namespace petrel
