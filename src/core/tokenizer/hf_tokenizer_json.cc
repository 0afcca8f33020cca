// Loading tokenizer.json (+ tokenizer_config.json, generation_config.json) into HfTokenizer.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/tokenizer/hf_tokenizer.h"
#include "core/tokenizer/unicode.h"

namespace petrel {
namespace tok {

using nlohmann::json;

class HfJsonLoader {
 public:
  static Result<std::unique_ptr<Tokenizer>> Load(std::string_view tokenizer_json,
                                                 std::string_view config_json,
                                                 std::string_view generation_json);

 private:
  explicit HfJsonLoader(HfTokenizer* tok) : tok_(*tok) {}
  Status LoadModel(json& model);
  Status LoadAddedTokens(json& added);
  Status LoadNormalizer(json& node);
  Status LoadPreTokenizer(json& node);
  Status LoadPostProcessor(json& node);
  Status LoadDecoder(json& node);
  Status LoadConfigs(std::string_view config_json, std::string_view generation_json);
  int32_t IdOf(std::string_view text) const { return tok_.vocab_.Find(text); }

  HfTokenizer& tok_;
};

namespace {

std::string StringOr(json& node, const char* key, std::string fallback) {
  const auto it = node.find(key);
  return it != node.end() && it->is_string() ? it->get<std::string>() : fallback;
}
bool BoolOr(json& node, const char* key, bool fallback) {
  const auto it = node.find(key);
  return it != node.end() && it->is_boolean() ? it->get<bool>() : fallback;
}
// An integer field in [0, INT32_MAX], or `fallback` when absent. Anything else is an error, not
// a conversion: a float outside int's range converts to an undefined value.
Result<int64_t> CountOr(json& node, const char* key, int64_t fallback) {
  const auto it = node.find(key);
  if (it == node.end()) return fallback;
  constexpr int64_t kMax = 0x7fffffff;
  const bool in_range =
      it->is_number_unsigned()
          ? it->get<uint64_t>() <= uint64_t(kMax)
          : it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= kMax;
  if (!in_range)
    return Error("field '%s': expected an integer from 0 to %lld", key, (long long)kMax);
  return it->get<int64_t>();
}

// A token id: an integer from 0 to INT32_MAX; anything else (a float, a negative or larger
// number, another type) is an error naming `what`.
Result<int32_t> TokenIdOf(const json& value, const char* what) {
  const bool in_range =
      value.is_number_unsigned()
          ? value.get<uint64_t>() <= uint64_t(INT32_MAX)
          : value.is_number_integer() && value.get<int64_t>() >= 0 &&
                value.get<int64_t>() <= INT32_MAX;
  if (!in_range) return Error("%s: expected a token id (an integer from 0 to %d)", what, INT32_MAX);
  return int32_t(value.get<int64_t>());
}

// `{"String": "x"}` -> literal; `{"Regex": "..."}` -> compiled regex.
Status LoadPattern(json& node, std::string* literal, std::unique_ptr<Regex>* regex) {
  if (!node.is_object()) return Error("pattern: expected an object");
  if (node.contains("String")) {
    *literal = node["String"].get<std::string>();
    return Status::Ok();
  }
  if (node.contains("Regex")) {
    auto compiled = Regex::Compile(node["Regex"].get<std::string>());
    if (!compiled.ok()) return compiled.status();
    *regex = std::move(compiled).value();
    return Status::Ok();
  }
  return Error("pattern: expected String or Regex");
}

Result<std::unique_ptr<Regex>> LiteralRegex(std::string_view literal) {
  std::string pattern = "\\Q";
  pattern.append(literal);
  pattern.append("\\E");
  return Regex::Compile(pattern);
}

Result<SplitBehavior> ParseBehavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return Error("unknown split behavior %s", name.c_str());
}

PrependScheme ParsePrependScheme(json& node) {
  const std::string scheme = StringOr(node, "prepend_scheme", "");
  if (scheme == "first") return PrependScheme::kFirst;
  if (scheme == "never") return PrependScheme::kNever;
  if (scheme.empty() && !BoolOr(node, "add_prefix_space", true)) return PrependScheme::kNever;
  return PrependScheme::kAlways;
}

}  // namespace

Status HfJsonLoader::LoadModel(json& model) {
  HfModel& out = tok_.model_;
  const std::string type = StringOr(model, "type", "BPE");
  if (type != "BPE" && type != "WordPiece" && type != "WordLevel") {
    return Error("model type %s is not supported", type.c_str());
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Error("model: missing vocab object");
  }
  for (const auto& [piece, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 24)) {
      return Error("model.vocab[%s]: bad id", piece.c_str());
    }
    tok_.vocab_.Set(id.get<int32_t>(), piece, TokenKind::kNormal);
  }
  const std::string unk = StringOr(model, "unk_token", "");
  out.unk_id = unk.empty() ? -1 : IdOf(unk);
  if (type == "WordPiece") {
    out.kind = HfModelKind::kWordPiece;
    out.continuing_subword_prefix = StringOr(model, "continuing_subword_prefix", "##");
    PETREL_ASSIGN_OR_RETURN(const int64_t max_chars,
                            CountOr(model, "max_input_chars_per_word",
                                    int64_t(out.max_input_chars_per_word)));
    out.max_input_chars_per_word = size_t(max_chars);
    return Status::Ok();
  }
  if (type == "WordLevel") {
    out.kind = HfModelKind::kWordLevel;
    return Status::Ok();
  }
  out.kind = HfModelKind::kBpe;
  out.ignore_merges = BoolOr(model, "ignore_merges", false);
  out.byte_fallback = BoolOr(model, "byte_fallback", false);
  out.fuse_unk = BoolOr(model, "fuse_unk", false);
  out.continuing_subword_prefix = StringOr(model, "continuing_subword_prefix", "");
  out.end_of_word_suffix = StringOr(model, "end_of_word_suffix", "");
  if (!model.contains("merges") || !model["merges"].is_array()) return Status::Ok();
  const size_t prefix_size = out.continuing_subword_prefix.size();
  int32_t rank = 0;
  for (json& merge : model["merges"]) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos) return Error("merge %d: expected \"a b\"", rank);
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return Error("merge %d: expected a string or a pair", rank);
    }
    // With a continuing-subword prefix the merged token drops the right side's prefix.
    const std::string merged =
        left + (prefix_size && right.compare(0, prefix_size, out.continuing_subword_prefix) == 0
                    ? right.substr(prefix_size)
                    : right);
    const int32_t left_id = IdOf(left), right_id = IdOf(right), merged_id = IdOf(merged);
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      return Error("merge %d (%s %s): token not in vocab", rank, left.c_str(), right.c_str());
    }
    out.merges.Add(left_id, right_id, rank++, merged_id);
    out.joinable.AddPiece(merged);
  }
  return Status::Ok();
}

Status HfJsonLoader::LoadAddedTokens(json& added) {
  if (!added.is_array()) return Status::Ok();
  for (json& entry : added) {
    HfAddedToken token;
    PETREL_ASSIGN_OR_RETURN(const int64_t id, CountOr(entry, "id", -1));
    token.id = int32_t(id);
    token.content = StringOr(entry, "content", "");
    if (token.id < 0 || token.content.empty()) return Error("added_tokens: bad entry");
    token.single_word = BoolOr(entry, "single_word", false);
    token.lstrip = BoolOr(entry, "lstrip", false);
    token.rstrip = BoolOr(entry, "rstrip", false);
    token.normalized = BoolOr(entry, "normalized", !BoolOr(entry, "special", false));
    token.special = BoolOr(entry, "special", false);
    tok_.vocab_.Set(token.id, token.content,
                    token.special ? TokenKind::kControl : TokenKind::kUserDefined);
    tok_.added_.push_back(std::move(token));
  }
  return Status::Ok();
}

Status HfJsonLoader::LoadNormalizer(json& node) {
  if (node.is_null()) return Status::Ok();
  const std::string type = StringOr(node, "type", "");
  if (type == "Sequence") {
    for (json& child : node["normalizers"]) PETREL_RETURN_IF_ERROR(LoadNormalizer(child));
    return Status::Ok();
  }
  HfNormalizer step{};
  if (type == "Prepend") {
    step.kind = HfNormalizerKind::kPrepend;
    step.pattern = StringOr(node, "prepend", "");
  } else if (type == "Replace") {
    step.kind = HfNormalizerKind::kReplace;
    PETREL_RETURN_IF_ERROR(LoadPattern(node["pattern"], &step.pattern, &step.regex));
    step.content = StringOr(node, "content", "");
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = type == "NFC"    ? HfNormalizerKind::kNfc
                : type == "NFD"  ? HfNormalizerKind::kNfd
                : type == "NFKC" ? HfNormalizerKind::kNfkc
                                 : HfNormalizerKind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = HfNormalizerKind::kLowercase;
  } else if (type == "StripAccents") {
    step.kind = HfNormalizerKind::kStripAccents;
  } else if (type == "Strip") {
    step.kind = HfNormalizerKind::kStrip;
    step.strip_left = BoolOr(node, "strip_left", true);
    step.strip_right = BoolOr(node, "strip_right", true);
  } else if (type == "BertNormalizer") {
    step.kind = HfNormalizerKind::kBert;
    step.bert.clean_text = BoolOr(node, "clean_text", true);
    step.bert.handle_chinese_chars = BoolOr(node, "handle_chinese_chars", true);
    step.bert.lowercase = BoolOr(node, "lowercase", true);
    step.bert.strip_accents = BoolOr(node, "strip_accents", step.bert.lowercase);
  } else {
    return Error("normalizer type %s is not supported", type.c_str());
  }
  tok_.normalizers_.push_back(std::move(step));
  return Status::Ok();
}

Status HfJsonLoader::LoadPreTokenizer(json& node) {
  if (node.is_null()) return Status::Ok();
  const std::string type = StringOr(node, "type", "");
  if (type == "Sequence") {
    for (json& child : node["pretokenizers"]) {
      PETREL_RETURN_IF_ERROR(LoadPreTokenizer(child));
    }
    return Status::Ok();
  }
  HfPreTokenizer step{};
  if (type == "ByteLevel") {
    step.kind = HfPreTokenizerKind::kByteLevel;
    step.add_prefix_space = BoolOr(node, "add_prefix_space", true);
    if (BoolOr(node, "use_regex", true)) {
      PETREL_ASSIGN_OR_RETURN(step.regex, Regex::Compile(kGpt2Pattern));
    }
  } else if (type == "Metaspace") {
    step.kind = HfPreTokenizerKind::kMetaspace;
    step.replacement = StringOr(node, "replacement", "\u2581");
    step.prepend_scheme = ParsePrependScheme(node);
    step.split = BoolOr(node, "split", true);
  } else if (type == "Split") {
    step.kind = HfPreTokenizerKind::kSplit;
    std::string literal;
    PETREL_RETURN_IF_ERROR(LoadPattern(node["pattern"], &literal, &step.regex));
    if (!step.regex) {
      PETREL_ASSIGN_OR_RETURN(step.regex, LiteralRegex(literal));
    }
    PETREL_ASSIGN_OR_RETURN(step.behavior, ParseBehavior(StringOr(node, "behavior", "Isolated")));
    step.invert = BoolOr(node, "invert", false);
  } else if (type == "Digits" || type == "Punctuation" || type == "Whitespace") {
    // The same regex splits Hugging Face implements with character predicates.
    step.kind = HfPreTokenizerKind::kSplit;
    const char* pattern = type == "Whitespace"                       ? R"(\w+|[^\w\s]+)"
                          : type == "Punctuation"                    ? R"(\p{P}|[!-/:-@\[-`{-~])"
                          : BoolOr(node, "individual_digits", false) ? R"(\p{N})"
                                                                     : R"(\p{N}+)";
    PETREL_ASSIGN_OR_RETURN(step.regex, Regex::Compile(pattern));
    step.invert = type == "Whitespace";
    if (type == "Whitespace") {
      step.behavior = SplitBehavior::kRemoved;
    } else {
      PETREL_ASSIGN_OR_RETURN(step.behavior, ParseBehavior(StringOr(node, "behavior", "Isolated")));
    }
  } else if (type == "BertPreTokenizer") {
    step.kind = HfPreTokenizerKind::kBert;
  } else if (type == "WhitespaceSplit") {
    step.kind = HfPreTokenizerKind::kWhitespaceSplit;
  } else {
    return Error("pre_tokenizer type %s is not supported", type.c_str());
  }
  tok_.pre_tokenizers_.push_back(std::move(step));
  return Status::Ok();
}

Status HfJsonLoader::LoadPostProcessor(json& node) {
  if (node.is_null()) return Status::Ok();
  const std::string type = StringOr(node, "type", "");
  if (type == "Sequence") {
    for (json& child : node["processors"]) PETREL_RETURN_IF_ERROR(LoadPostProcessor(child));
  } else if (type == "TemplateProcessing") {
    bool after_sequence = false;
    for (json& item : node["single"]) {
      if (item.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken")) return Error("TemplateProcessing: unknown item");
      const std::string name = item["SpecialToken"].value("id", "");
      json& specials = node["special_tokens"];
      if (!specials.contains(name)) return Error("TemplateProcessing: no token %s", name.c_str());
      for (json& id : specials[name]["ids"]) {
        PETREL_ASSIGN_OR_RETURN(const int32_t token, TokenIdOf(id, "TemplateProcessing ids"));
        (after_sequence ? tok_.post_suffix_ : tok_.post_prefix_).push_back(token);
      }
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    PETREL_ASSIGN_OR_RETURN(const int32_t cls, TokenIdOf(node["cls"][1], "post_processor cls"));
    PETREL_ASSIGN_OR_RETURN(const int32_t sep, TokenIdOf(node["sep"][1], "post_processor sep"));
    tok_.post_prefix_.push_back(cls);
    tok_.post_suffix_.push_back(sep);
  } else if (type != "ByteLevel") {
    return Error("post_processor type %s is not supported", type.c_str());
  }
  return Status::Ok();
}

Status HfJsonLoader::LoadDecoder(json& node) {
  if (node.is_null()) return Status::Ok();
  tok_.has_decoder_ = true;
  const std::string type = StringOr(node, "type", "");
  if (type == "Sequence") {
    for (json& child : node["decoders"]) PETREL_RETURN_IF_ERROR(LoadDecoder(child));
    return Status::Ok();
  }
  HfDecoder step{};
  if (type == "Replace") {
    step.kind = HfDecoderKind::kReplace;
    PETREL_RETURN_IF_ERROR(LoadPattern(node["pattern"], &step.pattern, &step.regex));
    step.content = StringOr(node, "content", "");
  } else if (type == "ByteFallback") {
    step.kind = HfDecoderKind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = HfDecoderKind::kFuse;
  } else if (type == "Strip") {
    step.kind = HfDecoderKind::kStrip;
    step.pattern = StringOr(node, "content", " ");
    PETREL_ASSIGN_OR_RETURN(const int64_t start, CountOr(node, "start", 0));
    PETREL_ASSIGN_OR_RETURN(const int64_t stop, CountOr(node, "stop", 0));
    step.strip_start = size_t(start);
    step.strip_stop = size_t(stop);
  } else if (type == "ByteLevel") {
    step.kind = HfDecoderKind::kByteLevel;
  } else if (type == "Metaspace") {
    step.kind = HfDecoderKind::kMetaspace;
    step.pattern = StringOr(node, "replacement", "\u2581");
    step.prepend = ParsePrependScheme(node) != PrependScheme::kNever;
  } else if (type == "WordPiece") {
    step.kind = HfDecoderKind::kWordPiece;
    step.pattern = StringOr(node, "prefix", "##");
    step.cleanup = BoolOr(node, "cleanup", true);
  } else if (type == "BPEDecoder") {
    step.kind = HfDecoderKind::kBpeSuffix;
    step.pattern = StringOr(node, "suffix", "</w>");
  } else {
    return Error("decoder type %s is not supported", type.c_str());
  }
  tok_.decoders_.push_back(std::move(step));
  return Status::Ok();
}

Status HfJsonLoader::LoadConfigs(std::string_view config_json, std::string_view generation_json) {
  auto token_name = [](json& node) -> std::string {
    if (node.is_string()) return node.get<std::string>();
    if (node.is_object()) return StringOr(node, "content", "");
    return "";
  };
  if (!config_json.empty()) {
    json config = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) return Error("tokenizer_config.json: invalid JSON");
    if (config.contains("bos_token")) tok_.bos_id_ = IdOf(token_name(config["bos_token"]));
    if (config.contains("eos_token")) tok_.eos_id_ = IdOf(token_name(config["eos_token"]));
    tok_.clean_up_spaces_ = BoolOr(config, "clean_up_tokenization_spaces", false);
  } else if (!tok_.post_prefix_.empty()) {
    tok_.bos_id_ = tok_.post_prefix_.front();
  }
  if (tok_.eos_id_ >= 0) tok_.eog_ids_.insert(tok_.eos_id_);
  if (!generation_json.empty()) {
    json generation = json::parse(generation_json, nullptr, false);
    if (generation.is_discarded()) return Error("generation_config.json: invalid JSON");
    json eos = generation.value("eos_token_id", json());
    if (eos.is_number()) {
      PETREL_ASSIGN_OR_RETURN(const int32_t id, TokenIdOf(eos, "generation_config.json eos_token_id"));
      tok_.eog_ids_.insert(id);
    }
    if (eos.is_array()) {
      for (json& value : eos) {
        if (!value.is_number()) continue;  // as a missing entry
        PETREL_ASSIGN_OR_RETURN(const int32_t id,
                                TokenIdOf(value, "generation_config.json eos_token_id"));
        tok_.eog_ids_.insert(id);
      }
    }
  }
  // Special tokens whose text marks the end of a turn, as llama.cpp detects them.
  static const char* const kEndTexts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",        "<|endoftext|>",
      "<|eom_id|>", "<EOT>",      "<|end_of_text|>", "<｜end▁of▁sentence｜>"};
  for (const HfAddedToken& token : tok_.added_) {
    for (const char* text : kEndTexts) {
      if (token.special && token.content == text) tok_.eog_ids_.insert(token.id);
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<Tokenizer>> HfJsonLoader::Load(std::string_view tokenizer_json,
                                                      std::string_view config_json,
                                                      std::string_view generation_json) {
  // Mutable on purpose: a missing key then reads as null (and throws on use) instead of hitting
  // nlohmann's assertion for operator[] on a const object.
  json root = json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Error("tokenizer.json: invalid JSON");
  auto tokenizer = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  HfJsonLoader loader(tokenizer.get());
  // nlohmann throws on type mismatches inside a well-formed document; turn that into a Status.
  try {
    if (!root.contains("model")) return Error("tokenizer.json: no model");
    PETREL_RETURN_IF_ERROR(loader.LoadModel(root["model"]).Wrap("tokenizer.json model"));
    PETREL_RETURN_IF_ERROR(loader.LoadAddedTokens(root["added_tokens"]));
    PETREL_RETURN_IF_ERROR(loader.LoadNormalizer(root["normalizer"]));
    PETREL_RETURN_IF_ERROR(loader.LoadPreTokenizer(root["pre_tokenizer"]));
    PETREL_RETURN_IF_ERROR(loader.LoadPostProcessor(root["post_processor"]));
    PETREL_RETURN_IF_ERROR(loader.LoadDecoder(root["decoder"]));
    PETREL_RETURN_IF_ERROR(loader.LoadConfigs(config_json, generation_json));
  } catch (const json::exception& e) {
    return Error("tokenizer.json: %s", e.what());
  }
  HfTokenizer& tok = *tokenizer;
  tok.special_.assign(tok.vocab_.size(), false);
  for (size_t index = 0; index < tok.added_.size(); ++index) {
    const HfAddedToken& token = tok.added_[index];
    tok.special_[token.id] = token.special;
    if (SanitizeUtf8(token.content) != token.content) continue;  // can never match valid text
    if (token.normalized) {
      tok.normalized_trie_.Add(tok.Normalize(token.content), static_cast<int32_t>(index));
    } else {
      tok.raw_trie_.Add(token.content, static_cast<int32_t>(index));
    }
  }
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

Result<std::unique_ptr<Tokenizer>> LoadHfTokenizer(std::string_view tokenizer_json,
                                                   std::string_view config_json,
                                                   std::string_view generation_json) {
  return HfJsonLoader::Load(tokenizer_json, config_json, generation_json);
}

}  // namespace tok

namespace {

// Reads a whole file; `*found` is false (and the result empty) when it does not exist.
Result<std::string> ReadFile(const std::string& path, bool* found) {
  std::ifstream file(path, std::ios::binary);
  *found = file.is_open();
  if (!*found) return std::string();
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return Error("%s: read error", path.c_str());
  return text.str();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromHfJson(std::string_view tokenizer_json,
                                                         std::string_view tokenizer_config_json,
                                                         std::string_view generation_config_json) {
  return tok::LoadHfTokenizer(tokenizer_json, tokenizer_config_json, generation_config_json);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromHfFolder(const std::string& folder) {
  bool found = false;
  PETREL_ASSIGN_OR_RETURN(const std::string tokenizer_json,
                          ReadFile(folder + "/tokenizer.json", &found));
  if (!found) return Error("%s/tokenizer.json: not found", folder.c_str());
  PETREL_ASSIGN_OR_RETURN(const std::string config_json,
                          ReadFile(folder + "/tokenizer_config.json", &found));
  PETREL_ASSIGN_OR_RETURN(const std::string generation_json,
                          ReadFile(folder + "/generation_config.json", &found));
  auto tokenizer = FromHfJson(tokenizer_json, config_json, generation_json);
  if (!tokenizer.ok()) return tokenizer.status().Wrap(folder);
  return tokenizer;
}

}  // namespace petrel
