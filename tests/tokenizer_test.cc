// Tokenizer tests: golden ids/decodes for the story model (tokenizer.json and GGUF), llama.cpp's
// vocab test vectors, streaming decode, round trips and a no-crash fuzz.
#include "core/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "util/test_data.h"

namespace petrel {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string out;
  for (const int32_t id : ids) {
    out.push_back(' ');
    out.append(std::to_string(id));
  }
  return out;
}

struct StoryCase {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

std::vector<StoryCase> LoadStoryCases() {
  std::vector<StoryCase> cases;
  std::ifstream file(testing::SharedDir() + "/golden/story/tokenize.jsonl");
  for (std::string line; std::getline(file, line);) {
    if (line.empty()) continue;
    const auto json = nlohmann::json::parse(line);
    cases.push_back({json["text"].get<std::string>(), json["ids"].get<std::vector<int32_t>>(),
                     json["decoded"].get<std::string>()});
  }
  return cases;
}

std::unique_ptr<Tokenizer> LoadHfStory() {
  auto tokenizer = Tokenizer::FromHfFolder(testing::SharedDir() + "/models/story");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

TEST(HfStoryTokenizer, MatchesGoldenIdsAndDecodes) {
  const auto tokenizer = LoadHfStory();
  ASSERT_NE(tokenizer, nullptr);
  const auto cases = LoadStoryCases();
  ASSERT_EQ(cases.size(), 45u);
  size_t ids_ok = 0, decoded_ok = 0;
  for (const StoryCase& c : cases) {
    const std::vector<int32_t> ids = tokenizer->Encode(c.text);
    EXPECT_EQ(Join(ids), Join(c.ids)) << "text: " << c.text;
    ids_ok += ids == c.ids;
    const std::string decoded = tokenizer->Decode(c.ids);
    EXPECT_EQ(decoded, c.decoded) << "text: " << c.text;
    decoded_ok += decoded == c.decoded;
  }
  std::printf("story tokenizer.json: ids %zu/%zu, decoded %zu/%zu\n", ids_ok, cases.size(),
              decoded_ok, cases.size());
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(2));
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(80));
  EXPECT_TRUE(tokenizer->IsSpecial(0));
  EXPECT_EQ(tokenizer->n_vocab(), 2048u);
  EXPECT_EQ(tokenizer->TokenText(80), "\xE2\x96\x81");
}

TEST(HfStoryTokenizer, WithoutSpecialTokens) {
  const auto tokenizer = LoadHfStory();
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions options;
  options.add_special = false;
  EXPECT_EQ(tokenizer->Encode("hello", options), (std::vector<int32_t>{80, 109, 113, 67}));
  EXPECT_TRUE(tokenizer->Encode("", options).empty());
}

std::unique_ptr<Tokenizer> LoadGgufTokenizer(const std::string& path) {
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return nullptr;
  auto tokenizer = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

bool ContainsSpecialText(const std::string& text) {
  for (const char* special : {"<|start_story|>", "<|end_story|>", "<unk>"}) {
    if (text.find(special) != std::string::npos) return true;
  }
  return false;
}

// story-f32.gguf holds the same vocab as tokenizer.json but cannot say that its added tokens are
// `normalized` (matched only after a U+2581, see golden/README.md section 1): in GGUF their text is
// plain text unless parse_special, and with parse_special llama.cpp matches them anywhere. So
// lines that HF encodes with a special token id are checked separately below; every other line
// must match exactly.
TEST(GgufStoryTokenizer, MatchesGoldenIdsAndDecodes) {
  const auto tokenizer =
      LoadGgufTokenizer(testing::SharedDir() + "/models/story-gguf/story-f32.gguf");
  ASSERT_NE(tokenizer, nullptr);
  size_t checked = 0, ids_ok = 0, decoded_ok = 0, skipped = 0;
  for (const StoryCase& c : LoadStoryCases()) {
    const bool hf_matched_special = std::find_if(c.ids.begin() + 1, c.ids.end(),
                                                 [](int32_t id) { return id <= 2; }) != c.ids.end();
    if (hf_matched_special && ContainsSpecialText(c.text)) {
      ++skipped;
      continue;
    }
    ++checked;
    const std::vector<int32_t> ids = tokenizer->Encode(c.text);
    EXPECT_EQ(Join(ids), Join(c.ids)) << "text: " << c.text;
    ids_ok += ids == c.ids;
    const std::string decoded = tokenizer->Decode(c.ids);
    EXPECT_EQ(decoded, c.decoded) << "text: " << c.text;
    decoded_ok += decoded == c.decoded;
  }
  std::printf("story-f32.gguf: ids %zu/%zu, decoded %zu/%zu (%zu special-token lines skipped)\n",
              ids_ok, checked, decoded_ok, checked, skipped);
  // Special-token text with parse_special: a text that is exactly one special token.
  EncodeOptions parse;
  parse.parse_special = true;
  EXPECT_EQ(tokenizer->Encode("<|start_story|>", parse), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(tokenizer->Encode("<|end_story|>", parse), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(tokenizer->Encode("<unk>", parse), (std::vector<int32_t>{1, 0}));
  // Without parse_special the text must not turn into the control token.
  const auto as_text = tokenizer->Encode("<|end_story|>");
  EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 2), 0);
  const auto plain = tokenizer->Encode("a<|end_story|>b");
  EXPECT_EQ(plain, (std::vector<int32_t>{1, 85, 208, 183, 209, 210, 54}));
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(2));
}

// Plain spans: special-token text inside one stays text even with parse_special (a user's words
// inside a rendered chat prompt); outside them special tokens are matched as before.
TEST(PlainSpans, SpecialTextInsideAPlainSpanStaysText) {
  const auto gguf = LoadGgufTokenizer(testing::SharedDir() + "/models/story-gguf/story-f32.gguf");
  ASSERT_NE(gguf, nullptr);
  const std::string text = "<|end_story|>a<|end_story|>";
  EncodeOptions options;
  options.parse_special = true;
  const std::vector<int32_t> both = gguf->Encode(text, options);
  EXPECT_EQ(std::count(both.begin(), both.end(), 2), 2);
  options.plain_spans = {{13, 27}};  // the second one and the "a" before it
  const std::vector<int32_t> ids = gguf->Encode(text, options);
  EncodeOptions plain;
  plain.add_special = false;
  std::vector<int32_t> expected = {1, 2};
  for (int32_t id : gguf->Encode("a<|end_story|>", plain)) expected.push_back(id);
  EXPECT_EQ(ids, expected);
  // A span that only overlaps the special text also keeps it text.
  options.plain_spans = {{20, 21}};
  const std::vector<int32_t> overlapped = gguf->Encode(text, options);
  EXPECT_EQ(std::count(overlapped.begin(), overlapped.end(), 2), 1);

  auto hf = Tokenizer::FromHfFolder(testing::SharedDir() + "/models/story");
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  // tokenizer.json: the added tokens are matched where Hugging Face matches them (see above),
  // and not at all inside plain spans.
  options.plain_spans = {};
  const std::vector<int32_t> hf_all = (*hf)->Encode(text, options);
  EXPECT_GE(std::count(hf_all.begin(), hf_all.end(), 2), 1);
  options.plain_spans = {{0, text.size()}};
  const std::vector<int32_t> hf_none = (*hf)->Encode(text, options);
  EXPECT_EQ(std::count(hf_none.begin(), hf_none.end(), 2), 0);
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<VocabCase> LoadVocabCases(const std::string& base) {
  const std::string inp = ReadFile(base + ".inp");
  const std::string out = ReadFile(base + ".out");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t hit = inp.find(separator, pos);
    if (hit == std::string::npos) {
      cases.push_back({inp.substr(pos), {}});
      break;
    }
    cases.push_back({inp.substr(pos, hit - pos), {}});
    pos = hit + separator.size();
  }
  std::istringstream lines(out);
  size_t index = 0;
  for (std::string line; std::getline(lines, line) && index < cases.size(); ++index) {
    std::istringstream numbers(line);
    for (int32_t id; numbers >> id;) cases[index].ids.push_back(id);
  }
  EXPECT_EQ(index, cases.size()) << base;
  return cases;
}

class VocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabTest, MatchesLlamaCppVectors) {
  const std::string base =
      testing::SharedDir() + "/golden/tokenizer/ggml-vocab-" + GetParam() + ".gguf";
  const auto tokenizer = LoadGgufTokenizer(base);
  ASSERT_NE(tokenizer, nullptr);
  const auto cases = LoadVocabCases(base);
  ASSERT_EQ(cases.size(), 46u);
  EncodeOptions options;
  options.add_special = false;
  options.parse_special = false;
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> ids = tokenizer->Encode(cases[i].text, options);
    EXPECT_EQ(Join(ids), Join(cases[i].ids))
        << GetParam() << " line " << i + 1 << " text: \"" << cases[i].text << "\"";
    passed += ids == cases[i].ids;
  }
  std::printf("ggml-vocab-%s: %zu/%zu\n", GetParam(), passed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Golden, VocabTest,
                         ::testing::Values("llama-spm", "gpt-2", "mpt", "deepseek-llm",
                                           "bert-bge"));

// Tokenizers shared by the round-trip, streaming and fuzz tests.
struct AllTokenizers {
  std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> list;
  AllTokenizers() {
    list.emplace_back("story-hf", LoadHfStory());
    list.emplace_back("story-gguf", LoadGgufTokenizer(testing::SharedDir() +
                                                      "/models/story-gguf/story-f32.gguf"));
    for (const char* name : {"llama-spm", "gpt-2", "mpt", "deepseek-llm", "bert-bge"}) {
      list.emplace_back(name, LoadGgufTokenizer(testing::SharedDir() +
                                                "/golden/tokenizer/ggml-vocab-" + name + ".gguf"));
    }
  }
  const Tokenizer* Get(const std::string& name) const {
    for (const auto& [entry_name, tokenizer] : list) {
      if (entry_name == name) return tokenizer.get();
    }
    return nullptr;
  }
};

const AllTokenizers& Tokenizers() {
  static const AllTokenizers* tokenizers = new AllTokenizers();
  return *tokenizers;
}

bool IsValidUtf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<uint8_t>(text[i]);
    const size_t length = lead < 0x80         ? 1
                          : (lead >> 5) == 6  ? 2
                          : (lead >> 4) == 14 ? 3
                          : (lead >> 3) == 30 ? 4
                                              : 0;
    if (length == 0 || i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<uint8_t>(text[i + k]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

std::vector<std::string> RoundTripTexts() {
  std::vector<std::string> texts = {"Hello world",
                                    " leading space",
                                    "trailing space ",
                                    "multiple   spaces\tand\ttabs\n\n",
                                    "Ünïcödé ñ ß 日本語 中文 한국어 Ελληνικά кириллица",
                                    "emoji 🦙🚀😶‍🌫️ ✅",
                                    "code: for (int i = 0; i < n; ++i) { x[i] = 0; }",
                                    "\r\n\v\f",
                                    "digits 1234567890 3.14159",
                                    "’quotes‘ «guillemets» — dashes –"};
  std::string all_ascii;
  for (int c = 1; c < 128; ++c) all_ascii.push_back(static_cast<char>(c));
  texts.push_back(all_ascii);
  std::string latin1;
  for (uint32_t cpt = 0xA0; cpt < 0x180; ++cpt) {
    latin1.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    latin1.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
  texts.push_back(latin1);
  return texts;
}

// Byte-fallback SPM and byte-level BPE can represent every string exactly.
TEST(TokenizerRoundTrip, DecodeOfEncodeIsIdentity) {
  EncodeOptions options;
  options.add_special = false;
  for (const char* name : {"llama-spm", "gpt-2", "mpt", "deepseek-llm"}) {
    const Tokenizer* tokenizer = Tokenizers().Get(name);
    ASSERT_NE(tokenizer, nullptr) << name;
    for (const std::string& text : RoundTripTexts()) {
      EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(text, options)), text) << name;
      EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(text)), text) << name << " with BOS";
    }
  }
  // The story vocab has no byte tokens: only its own alphabet round-trips.
  const Tokenizer* story = Tokenizers().Get("story-hf");
  const std::string text = "Once upon a time, Lily said: \"Hi!\"\nThe end.";
  EXPECT_EQ(story->Decode(story->Encode(text)), text);
}

TEST(StreamDecoder, ConcatenationEqualsDecode) {
  for (const auto& [name, tokenizer] : Tokenizers().list) {
    ASSERT_NE(tokenizer, nullptr) << name;
    for (const std::string& text : RoundTripTexts()) {
      for (const bool skip_special : {true, false}) {
        const std::vector<int32_t> ids = tokenizer->Encode(text);
        StreamDecoder stream(*tokenizer, skip_special);
        std::string streamed;
        for (const int32_t id : ids) {
          const std::string piece = stream.Push(id);
          EXPECT_TRUE(IsValidUtf8(piece)) << name;
          streamed += piece;
        }
        streamed += stream.Flush();
        EXPECT_EQ(streamed, tokenizer->Decode(ids, skip_special)) << name << ": " << text;
      }
    }
  }
}

TEST(StreamDecoder, HoldsBackPartialCharacters) {
  const Tokenizer* tokenizer = Tokenizers().Get("llama-spm");
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions options;
  options.add_special = false;
  const std::vector<int32_t> ids = tokenizer->Encode("🦙", options);  // byte-fallback tokens
  ASSERT_GE(ids.size(), 4u);
  StreamDecoder stream(*tokenizer);
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = stream.Push(ids[i]);
    if (i + 1 < ids.size()) {
      EXPECT_EQ(piece, "") << "token " << i;
    }
    streamed += piece;
  }
  EXPECT_EQ(streamed + stream.Flush(), "🦙");
}

// Random text: single bytes (valid or not), random code points (surrogates and non-characters
// included), pieces that look like special tokens or byte tokens, and plain letters.
std::string RandomFuzzText(std::mt19937& rng) {
  const char* const kPieces[] = {"<|end_story|>", "<s>",  "</s>", "<unk>", "[CLS]",
                                 "<|endoftext|>", " ",    "\n",   "▁",     "é",
                                 "日本",          "🦙", "'s",   "##",    "<0x41>"};
  std::string text;
  const int n_parts = static_cast<int>(rng() % 24);
  for (int part = 0; part < n_parts; ++part) {
    switch (rng() % 4) {
      case 0:  // any byte, valid or not
        text.push_back(static_cast<char>(rng() % 256));
        break;
      case 1: {  // a random code point (surrogates included: they must be rejected)
        const uint32_t cpt = rng() % 0x110000;
        if (cpt < 0x80) {
          text.push_back(static_cast<char>(cpt));
        } else if (cpt < 0x800) {
          text += {static_cast<char>(0xC0 | (cpt >> 6)), static_cast<char>(0x80 | (cpt & 63))};
        } else if (cpt < 0x10000) {
          text +=
              {static_cast<char>(0xE0 | (cpt >> 12)), static_cast<char>(0x80 | ((cpt >> 6) & 63)),
               static_cast<char>(0x80 | (cpt & 63))};
        } else {
          text +=
              {static_cast<char>(0xF0 | (cpt >> 18)), static_cast<char>(0x80 | ((cpt >> 12) & 63)),
               static_cast<char>(0x80 | ((cpt >> 6) & 63)), static_cast<char>(0x80 | (cpt & 63))};
        }
        break;
      }
      case 2:
        text += kPieces[rng() % std::size(kPieces)];
        break;
      default:
        text.push_back(static_cast<char>('a' + rng() % 26));
    }
  }
  return text;
}

// Decodes `ids` both ways (skipping specials or not) and stream-decodes them one way: every output
// must be valid UTF-8 and the stream must add up to Decode(). (One stream mode per call keeps the
// sanitizer run short; the callers alternate it.)
void CheckDecodes(const std::string& name, const Tokenizer& tokenizer,
                  const std::vector<int32_t>& ids, const std::string& text,
                  bool stream_skip_special) {
  for (const bool skip_special : {false, true}) {
    const std::string decoded = tokenizer.Decode(ids, skip_special);
    EXPECT_TRUE(IsValidUtf8(decoded)) << name;
    if (skip_special != stream_skip_special) continue;
    StreamDecoder stream(tokenizer, skip_special);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = stream.Push(id);
      EXPECT_TRUE(IsValidUtf8(piece)) << name;
      streamed += piece;
    }
    streamed += stream.Flush();
    EXPECT_EQ(streamed, decoded) << name << " skip_special " << skip_special << " text: " << text;
  }
}

// 10 000 random strings through every tokenizer: encode with and without parse_special (and
// BOS/EOS on every other string), decode both ways, stream decode (each skip_special mode on half
// of the strings, with and without BOS, with and without parse_special); then random id sequences
// (invalid ids included) through the decoders. Runs under ASan/UBSan in scripts/test.sh.
TEST(TokenizerFuzz, RandomBytesNeverCrash) {
  constexpr int kIterations = 10000;
  std::mt19937 rng(1234);
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    const std::string text = RandomFuzzText(rng);
    for (const auto& [name, tokenizer] : Tokenizers().list) {
      ASSERT_NE(tokenizer, nullptr) << name;
      for (const bool parse_special : {false, true}) {
        EncodeOptions options;
        options.parse_special = parse_special;
        options.add_special = (iteration % 2) == 0;
        const std::vector<int32_t> ids = tokenizer->Encode(text, options);
        for (const int32_t id : ids) {
          ASSERT_TRUE(id >= 0 && static_cast<size_t>(id) < tokenizer->n_vocab()) << name;
        }
        CheckDecodes(name, *tokenizer, ids, text, ((iteration / 2) % 2 == 0) != parse_special);
      }
    }
    if (::testing::Test::HasFailure()) break;  // one report, not thousands
  }
  for (const auto& [name, tokenizer] : Tokenizers().list) {
    ASSERT_NE(tokenizer, nullptr) << name;
    const auto n_vocab = static_cast<int32_t>(tokenizer->n_vocab());
    for (int iteration = 0; iteration < 200 && !::testing::Test::HasFailure(); ++iteration) {
      std::vector<int32_t> ids(rng() % 16);
      for (int32_t& id : ids) id = static_cast<int32_t>(rng() % n_vocab);
      CheckDecodes(name, *tokenizer, ids, "(random ids)", iteration % 2 == 0);
      ids.push_back(-1);
      ids.push_back(n_vocab);
      ids.push_back(INT32_MAX);
      EXPECT_TRUE(IsValidUtf8(tokenizer->Decode(ids, false))) << name;
    }
  }
}

TEST(TokenizerFuzz, InvalidUtf8IsReplacedDeterministically) {
  const Tokenizer* tokenizer = Tokenizers().Get("gpt-2");
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions options;
  options.add_special = false;
  EXPECT_EQ(tokenizer->Encode("a\xFF"
                              "b",
                              options),
            tokenizer->Encode("a\xEF\xBF\xBD"
                              "b",
                              options));
  EXPECT_EQ(tokenizer->Decode(tokenizer->Encode("\xC3", options)), "\xEF\xBF\xBD");
}

TEST(BpeMerging, LongInputIsFast) {
  // A priority-queue merge is O(n log n): 200k characters in one word take well under a second.
  const Tokenizer* tokenizer = Tokenizers().Get("gpt-2");
  ASSERT_NE(tokenizer, nullptr);
  const std::string text(200000, 'a');
  const auto ids = tokenizer->Encode(text, {false, false, {}});
  EXPECT_EQ(tokenizer->Decode(ids), text);
  const Tokenizer* story = Tokenizers().Get("story-hf");
  const std::string story_text(100000, 'z');
  EXPECT_EQ(story->Decode(story->Encode(story_text)), story_text);
}

// A tiny byte-level BPE tokenizer.json: merges as [a, b] pairs, an rstrip added token, a
// TemplateProcessing with BOS and EOS, and the ByteLevel decoder.
TEST(HfJsonTokenizer, ByteLevelBpe) {
  const char* const kJson = R"({
    "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false},
                     {"id": 1, "content": "</s>", "special": true, "normalized": false},
                     {"id": 2, "content": "<tool>", "special": false, "normalized": false,
                      "rstrip": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}},
                 {"SpecialToken": {"id": "</s>"}}],
      "special_tokens": {"<s>": {"ids": [0]}, "</s>": {"ids": [1]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "<tool>": 2, "h": 3, "i": 4,
              "Ġ": 5, "hi": 6, "Ġhi": 7, "Ã": 8, "©": 9, "Ã©": 10},
              "merges": [["h", "i"], ["Ġ", "hi"], ["Ã", "©"]]}})";
  auto tokenizer = Tokenizer::FromHfJson(kJson);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  EXPECT_EQ(Join((*tokenizer)->Encode("hi hi")), Join({0, 6, 7, 1}));
  EXPECT_EQ(Join((*tokenizer)->Encode("hi<tool>   hi", {false, false, {}})), Join({6, 2, 6}));
  EXPECT_EQ(Join((*tokenizer)->Encode("\xC3\xA9", {false, false, {}})), Join({10}));
  EXPECT_EQ((*tokenizer)->Decode({0, 6, 7, 10, 1}), "hi hié");
  EXPECT_EQ((*tokenizer)->Decode({0, 6, 1}, false), "<s>hi</s>");
  EXPECT_EQ((*tokenizer)->bos_id(), 0);
}

// Metaspace pre-tokenizer with byte fallback and the Metaspace decoder. (HF's Metaspace decoder
// drops every U+2581 of the first token, so it must run before Fuse.)
TEST(HfJsonTokenizer, MetaspaceWithByteFallback) {
  std::string vocab = R"("<unk>": 0, "▁": 1, "a": 2, "b": 3, "▁a": 4)";
  for (int byte = 0; byte < 256; ++byte) {
    char piece[16];
    std::snprintf(piece, sizeof(piece), ", \"<0x%02X>\": %d", byte, 5 + byte);
    vocab += piece;
  }
  const std::string json = R"({"added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                      "split": false},
    "post_processor": null,
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"},
                {"type": "Fuse"}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true,
              "vocab": {)" +
                           vocab + R"(}, "merges": ["▁ a"]}})";
  auto tokenizer = Tokenizer::FromHfJson(json);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  // "a ab" -> "▁a▁ab"; "é" falls back to its two UTF-8 bytes.
  EXPECT_EQ(Join((*tokenizer)->Encode("a ab")), Join({4, 4, 3}));
  EXPECT_EQ(Join((*tokenizer)->Encode("é")), Join({1, 5 + 0xC3, 5 + 0xA9}));
  EXPECT_EQ((*tokenizer)->Decode((*tokenizer)->Encode("a ab é")), "a ab é");
}

// Malformed tokenizer.json documents: a clear error (or a usable tokenizer), never an assertion
// or a crash on a missing key or a short array.
TEST(HfJsonTokenizer, MalformedDocumentsGiveErrors) {
  const std::string model = R"("model":{"type":"BPE","vocab":{"a":0,"b":1}})";
  const std::vector<std::string> bad = {
      "{" + model +
          R"(,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"X"}}]}})",
      "{" + model + R"(,"post_processor":{"type":"BertProcessing"}})",
      "{" + model + R"(,"post_processor":{"type":"BertProcessing","cls":["a"],"sep":[]}})",
      "{" + model + R"(,"normalizer":{"type":"Replace"}})",
      "{" + model + R"(,"pre_tokenizer":{"type":"Split","pattern":{}}})",
      "{" + model +
          R"(,"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":3}]}})",
      "{" + model + R"(,"added_tokens":[{"id":5}]})",
      R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a"]]}})",
      R"({"model":7})",
      R"({"model":{"type":"BPE","vocab":[]}})",
      "[]",
      "{",
  };
  for (const std::string& json : bad) {
    const auto tokenizer = Tokenizer::FromHfJson(json);
    EXPECT_FALSE(tokenizer.ok()) << json;
  }
  const auto empty_sequence =
      Tokenizer::FromHfJson("{" + model + R"(,"normalizer":{"type":"Sequence"}})");
  ASSERT_TRUE(empty_sequence.ok()) << empty_sequence.status().message();
  EXPECT_EQ((*empty_sequence)->Encode("ab"), (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace petrel
