// PCRE2-backed splitting and the per-model pre-tokenizer regex table (data, not code paths).
#include "core/tokenizer/pretokenizers.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdio>

#include "core/tokenizer/unicode.h"

namespace petrel::tok {

const char* const kGpt2Pattern =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";

Result<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error_code, message.data(), message.size());
    return Error("regex /%.*s/: %s at offset %zu", static_cast<int>(pattern.size()), pattern.data(),
                 reinterpret_cast<const char*>(message.data()), static_cast<size_t>(error_offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
  return std::unique_ptr<Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<Span> Regex::Split(std::string_view text) const {
  std::vector<Span> spans;
  // Match data is per call so that one compiled regex serves concurrent Encode() calls.
  pcre2_match_data* match_data = pcre2_match_data_create_from_pattern(code_, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0;
  size_t offset = 0;
  uint32_t options = 0;
  while (offset <= text.size()) {
    const int rc = pcre2_match(code_, subject, text.size(), offset, options | PCRE2_NO_UTF_CHECK,
                               match_data, nullptr);
    if (rc < 0) {
      if (options == 0) break;
      // No non-empty match at this position after an empty one: step one character on.
      options = 0;
      if (offset >= text.size()) break;
      offset += Utf8CharLen(text, offset);
      continue;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (begin > gap_start) spans.push_back({gap_start, begin, false});
    if (end > begin) spans.push_back({begin, end, true});
    gap_start = end;
    offset = end;
    options = end == begin ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  if (gap_start < text.size()) spans.push_back({gap_start, text.size(), false});
  pcre2_match_data_free(match_data);
  return spans;
}

std::string Regex::ReplaceAll(std::string_view text, std::string_view replacement) const {
  std::string out;
  for (const Span& span : Split(text)) {
    if (span.matched) {
      out.append(replacement);
    } else {
      out.append(text.substr(span.begin, span.end - span.begin));
    }
  }
  return out;
}

std::vector<std::string_view> SplitByRegexes(std::string_view text,
                                             const std::vector<std::unique_ptr<Regex>>& regexes) {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  for (const auto& regex : regexes) {
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    for (const std::string_view piece : pieces) {
      for (const Span& span : regex->Split(piece)) {
        next.push_back(piece.substr(span.begin, span.end - span.begin));
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

std::vector<std::pair<size_t, size_t>> ApplySplitBehavior(const std::vector<Span>& spans,
                                                          SplitBehavior behavior, bool invert) {
  std::vector<std::pair<size_t, size_t>> out;
  auto emit = [&](size_t begin, size_t end) {
    if (end > begin) out.emplace_back(begin, end);
  };
  size_t pending = std::string_view::npos;  // start of a piece still open
  bool previous_matched = false;
  for (const Span& span : spans) {
    const bool matched = span.matched != invert;
    switch (behavior) {
      case SplitBehavior::kRemoved:
        if (!matched) emit(span.begin, span.end);
        break;
      case SplitBehavior::kIsolated:
        emit(span.begin, span.end);
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (pending == std::string_view::npos) pending = span.begin;
        if (matched) {
          emit(pending, span.end);
          pending = std::string_view::npos;
        }
        break;
      case SplitBehavior::kMergedWithNext:
        if (matched && pending != std::string_view::npos) {
          emit(pending, span.begin);
          pending = std::string_view::npos;
        }
        if (pending == std::string_view::npos) pending = span.begin;
        break;
      case SplitBehavior::kContiguous:
        if (pending != std::string_view::npos && matched != previous_matched) {
          emit(pending, span.begin);
          pending = std::string_view::npos;
        }
        if (pending == std::string_view::npos) pending = span.begin;
        break;
    }
    previous_matched = matched;
  }
  if (pending != std::string_view::npos && !spans.empty()) emit(pending, spans.back().end);
  return out;
}

namespace {

// Patterns as llama.cpp (llama-vocab.cpp) uses them; where llama.cpp rewrote a tokenizer.json
// regex for std::regex, the original is used, since PCRE2 supports it.
const char* const kDefaultPunct = R"re([\p{P}\$\+<=>\^~\|]+)re";
const char* const kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kQwen2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kGpt2NoTail =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
// Letters of the Unicode ranges DeepSeek lists, escaped so that no source normalization
// (NFC folds e.g. U+212A KELVIN SIGN into K) can change them.
const char* const kDeepseekLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})re"
    R"re(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})re"
    R"re(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})re"
    R"re(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})re"
    R"re(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})re"
    R"re(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})re"
    R"re(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})re"
    R"re(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})re"
    R"re(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})re"
    R"re(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})re"
    R"re(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})re"
    R"re(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})re"
    R"re(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})re"
    R"re(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})re"
    R"re(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";
const char* const kTekken =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kPoro = R"re( ?[^(\s|.,!?…。，、।۔،)]+)re";

struct PresetEntry {
  std::vector<const char*> names;
  bool ignore_merges;
  bool add_bos;
  std::vector<const char*> patterns;
};

const std::vector<PresetEntry>& Presets() {
  static const std::vector<PresetEntry> presets = {
      {{"default"}, false, false, {kDefaultPunct, kGpt2NoTail, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       true,
       true,
       {kLlama3}},
      {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, false, false, {kLlama3}},
      {{"deepseek-llm"},
       false,
       false,
       {"[\r\n]", kDeepseekLetters, R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re", R"re(\s+$)re",
        "[一-龥ࠀ-一가-퟿]+", R"re(\p{N}+)re"}},
      {{"deepseek-coder"},
       false,
       false,
       {"[\r\n]", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", "[一-龥ࠀ-一가-퟿]+",
        R"re(\p{N})re"}},
      {{"deepseek-v3", "hunyuan-dense"},
       false,
       false,
       {R"re(\p{N}{1,3})re", "[一-龥぀-ゟ゠-ヿ]+",
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {{"falcon"}, false, false, {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2NoTail, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       false,
       false,
       {R"re(\p{N})re", kGpt2NoTail}},
      {{"gpt-2", "gpt2", "mpt", "olmo", "jais", "trillion", "granite-docling", "phi-2", "jina-es",
        "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code",
        "roberta-bpe", "a.x-4.0", "mellum", "exaone4"},
       false,
       false,
       {kGpt2NoTail}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2", "hunyuan"},
       false,
       false,
       {kQwen2}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, false, false, {kPoro}},
      {{"viking"}, false, false, {kPoro, R"re(\p{N})re"}},
      {{"tekken"}, true, true, {kTekken}},
      {{"gpt-4o", "llama4", "minimax-m2"}, false, false, {kGpt4o}},
      {{"superbpe"}, false, false, {R"re(\p{N}+)re", R"re((?=(\d{3})+(?!\d)))re"}},
      {{"bailingmoe", "bailingmoe2", "llada-moe"},
       false,
       false,
       {R"re('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re"}},
      {{"seed-coder"},
       false,
       false,
       {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {{"grok-2"}, false, false, {kQwen2}},
      {{"chameleon"},
       false,
       true,
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"re(([\t\n]|    |  ))re",
        R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2NoTail}},
  };
  return presets;
}

}  // namespace

PreTokenizerPreset FindPreTokenizerPreset(std::string_view name) {
  for (const PresetEntry& entry : Presets()) {
    for (const char* entry_name : entry.names) {
      if (name == entry_name) return {true, entry.ignore_merges, entry.add_bos, entry.patterns};
    }
  }
  return {false, false, false, {kGpt2NoTail}};
}

}  // namespace petrel::tok
