// Tokenizer throughput on ~1 MB of ordinary English text: input bytes encoded per second for SPM,
// byte-level BPE (GGUF and tokenizer.json) and WordPiece, plus decode of the same tokens.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "core/tokenizer/tokenizer.h"

namespace petrel {
namespace {

std::string SharedDir() {
  const char* dir = std::getenv("PETREL_SHARED_DIR");
  return dir ? dir : "../shared";
}

// Deterministic English-like prose: words drawn from a fixed list with a fixed seed, sentences of
// 6-20 words with commas, capitalized starts, and a paragraph break every few sentences.
std::string EnglishText(size_t target_bytes) {
  static const char* const kWords[] = {
      "the",        "of",        "and",     "to",        "in",          "a",         "is",
      "that",       "for",       "it",      "as",        "was",         "with",      "be",
      "by",         "on",        "not",     "he",        "this",        "are",       "or",
      "his",        "from",      "at",      "which",     "but",         "have",      "an",
      "had",        "they",      "you",     "were",      "their",       "one",       "all",
      "we",         "can",       "her",     "has",       "there",       "been",      "if",
      "more",       "when",      "will",    "would",     "who",         "so",        "no",
      "time",       "people",    "year",    "way",       "day",         "man",       "thing",
      "woman",      "life",      "child",   "world",     "school",      "state",     "family",
      "student",    "group",     "country", "problem",   "hand",        "part",      "place",
      "case",       "week",      "company", "system",    "program",     "question",  "work",
      "government", "number",    "night",   "point",     "home",        "water",     "room",
      "mother",     "area",      "money",   "story",     "fact",        "month",     "lot",
      "right",      "study",     "book",    "eye",       "job",         "word",      "business",
      "issue",      "side",      "kind",    "head",      "house",       "service",   "friend",
      "father",     "power",     "hour",    "game",      "line",        "end",       "member",
      "law",        "car",       "city",    "community", "name",        "president", "team",
      "minute",     "idea",      "kid",     "body",      "information", "back",      "parent",
      "face",       "others",    "level",   "office",    "door",        "health",    "person",
      "art",        "war",       "history", "party",     "result",      "change",    "morning",
      "reason",     "research",  "girl",    "guy",       "moment",      "air",       "teacher",
      "force",      "education", "good",    "new",       "first",       "last",      "long",
      "great",      "little",    "own",     "other",     "old",         "big",       "high",
      "different",  "small",     "large",   "next",      "early",       "young",     "important",
      "few",        "public",    "bad",     "same",      "able",        "said",      "went",
      "made",       "knew",      "thought", "looked",    "wanted",      "gave",      "used",
      "found",      "told",      "asked",   "seemed",    "felt",        "tried",     "left",
      "called",     "don't",     "it's",    "1984",      "42",          "3.5",       "Mr.",
      "London",     "Monday",    "quickly", "however"};
  std::mt19937 rng(20240601);
  std::string text;
  text.reserve(target_bytes + 256);
  size_t sentences_in_paragraph = 0;
  while (text.size() < target_bytes) {
    const size_t n_words = 6 + rng() % 15;
    for (size_t i = 0; i < n_words; ++i) {
      std::string word = kWords[rng() % std::size(kWords)];
      if (i == 0 && word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 32);
      if (i > 0) text.push_back(' ');
      text += word;
      if (i + 1 < n_words && rng() % 9 == 0) text.push_back(',');
    }
    text += (rng() % 10 == 0) ? "?" : ".";
    if (++sentences_in_paragraph >= 3 + rng() % 5) {
      text += "\n\n";
      sentences_in_paragraph = 0;
    } else {
      text.push_back(' ');
    }
  }
  return text;
}

const std::string& Text() {
  static const std::string text = EnglishText(size_t{1} << 20);
  return text;
}

// Loaded once per process; a missing file makes the benchmark report an error instead of a figure.
const Tokenizer* Get(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  std::unique_ptr<Tokenizer> tokenizer;
  if (name == "story-hf") {
    auto loaded = Tokenizer::FromHfFolder(SharedDir() + "/models/story");
    if (loaded.ok()) tokenizer = std::move(loaded).value();
  } else {
    auto file = GgufFile::Open(SharedDir() + "/golden/tokenizer/ggml-vocab-" + name + ".gguf");
    if (file.ok()) {
      auto loaded = Tokenizer::FromGguf(**file);
      if (loaded.ok()) tokenizer = std::move(loaded).value();
    }
  }
  return cache.emplace(name, std::move(tokenizer)).first->second.get();
}

void BM_Encode(benchmark::State& state, const char* name) {
  const Tokenizer* tokenizer = Get(name);
  if (tokenizer == nullptr) {
    state.SkipWithError("tokenizer not found (PETREL_SHARED_DIR?)");
    return;
  }
  const std::string& text = Text();
  size_t n_tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = tokenizer->Encode(text, {false, false, {}});
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(n_tokens);
  state.counters["bytes/token"] = double(text.size()) / double(n_tokens ? n_tokens : 1);
}

// Decode throughput, counted in bytes of decoded text.
void BM_Decode(benchmark::State& state, const char* name) {
  const Tokenizer* tokenizer = Get(name);
  if (tokenizer == nullptr) {
    state.SkipWithError("tokenizer not found (PETREL_SHARED_DIR?)");
    return;
  }
  const std::vector<int32_t> ids = tokenizer->Encode(Text(), {false, false, {}});
  size_t n_bytes = 0;
  for (auto _ : state) {
    const std::string text = tokenizer->Decode(ids);
    n_bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(n_bytes));
}

BENCHMARK_CAPTURE(BM_Encode, spm_llama, "llama-spm")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_gpt2, "gpt-2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_hf_story, "story-hf")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, wordpiece_bert, "bert-bge")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, spm_llama, "llama-spm")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, bpe_gpt2, "gpt-2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, bpe_hf_story, "story-hf")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace petrel

BENCHMARK_MAIN();
