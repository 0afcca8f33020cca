// BuildPromptSet: word sequences sized against the server's tokenizer.
#include "tools/bench_serve_prompts.h"

#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <string_view>

namespace petrel::tools {
namespace {

constexpr std::string_view kWords[] = {
    "the",      "river",     "quiet",    "morning",   "light",     "over",      "a",
    "small",    "town",      "where",    "people",    "walk",      "slowly",    "past",
    "old",      "houses",    "garden",   "bright",    "children",  "laugh",     "and",
    "run",      "toward",    "market",   "baker",     "sells",     "warm",      "bread",
    "every",    "day",       "before",   "sunrise",   "winter",    "snow",      "covers",
    "hills",    "while",     "birds",    "sing",      "softly",    "engine",    "number",
    "system",   "careful",   "measure",  "distance",  "between",   "stars",     "ancient",
    "library",  "holds",     "books",    "written",   "forgotten", "languages", "scholars",
    "travel",   "far",       "study",    "them",      "under",     "candle",    "glow",
    "stone",    "bridge",    "crosses",  "deep",      "valley",    "farmers",   "carry",
    "apples",   "wooden",    "carts",    "rain",      "falls",     "on",        "roofs",
    "green",    "fields",    "stretch",  "beyond",    "horizon",   "musician",  "plays",
    "violin",   "near",      "fountain", "crowd",     "gathers",   "listen",    "ocean",
    "waves",    "break",     "against",  "rocky",     "shore",     "sailors",   "mend",
    "nets",     "tell",      "stories",  "about",     "storms",    "islands",   "clock",
    "tower",    "strikes",   "noon",     "merchants", "count",     "silver",    "coins",
    "forest",   "path",      "leads",    "hidden",    "lake",      "fox",       "watches",
    "from",     "shadows",   "painter",  "mixes",     "colors",    "canvas",    "shows",
    "mountain", "sunset",    "teacher",  "explains",  "simple",    "rules",     "of",
    "geometry", "curious",   "students", "ask",       "questions", "kitchen",   "smells",
    "spices",   "soup",      "boils",    "pot",       "train",     "arrives",   "late",
    "station",  "travelers", "hurry",    "with",      "heavy",     "bags",      "letters",
    "arrive",   "friends",   "distant",  "cities",    "describe",  "festivals", "lanterns",
    "music",    "dancing",   "streets",  "until",     "midnight",  "machines",  "hum",
    "factory",  "workers",   "build",    "tools",     "iron",      "copper",    "glass",
    "windows",  "reflect",   "clouds",   "moving",    "east",      "wind",      "carries",
    "seeds",    "across",    "valleys",  "new",       "flowers",   "bloom",     "spring",
    "returns",  "once",      "again",
};
constexpr size_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);

// `count` words as sentences: capitalised first words, a full stop every 6 to 14 words.
std::vector<std::string> Sentences(std::mt19937_64& rng, size_t count) {
  std::vector<std::string> words;
  size_t until_stop = 6 + rng() % 9;
  bool capital = true;
  for (size_t i = 0; i < count; ++i) {
    std::string word(kWords[rng() % kWordCount]);
    if (capital) word[0] = char(std::toupper(static_cast<unsigned char>(word[0])));
    capital = --until_stop == 0;
    if (capital) {
      word += ".";
      until_stop = 6 + rng() % 9;
    }
    words.push_back(std::move(word));
  }
  return words;
}

std::string Join(const std::vector<std::string>& words, size_t count) {
  std::string text;
  for (size_t i = 0; i < count && i < words.size(); ++i) {
    if (i > 0) text += ' ';
    text += words[i];
  }
  return text;
}

class TokenCounter {
 public:
  TokenCounter(const std::string& url, const std::string& api_key) : client_(url) {
    client_.set_read_timeout(60, 0);
    if (!api_key.empty()) headers_ = {{"Authorization", "Bearer " + api_key}};
  }
  Result<size_t> Count(const std::string& text) {
    const nlohmann::json body = {{"content", text}, {"add_special", true}};
    auto res = client_.Post("/tokenize", headers_, body.dump(), "application/json");
    if (!res) return Error("POST /tokenize: %s", httplib::to_string(res.error()).c_str());
    if (res->status != 200) {
      return Error("POST /tokenize: HTTP %d: %s", res->status, res->body.substr(0, 200).c_str());
    }
    const nlohmann::json reply = nlohmann::json::parse(res->body, nullptr, false);
    if (!reply.is_object() || !reply.contains("tokens") || !reply["tokens"].is_array()) {
      return Error("POST /tokenize: no token list in %s", res->body.substr(0, 200).c_str());
    }
    return reply["tokens"].size();
  }

 private:
  httplib::Client client_;
  httplib::Headers headers_;
};

// The shortest prefix of `words`, after `head`, whose text reaches `target` tokens; found by
// stepping the word count by the token shortfall at the ratio seen so far.
Result<BenchPrompt> Fit(TokenCounter& counter, const std::string& head,
                        const std::vector<std::string>& words, size_t target) {
  auto text_of = [&](size_t count) {
    const std::string tail = Join(words, count);
    return head.empty() ? tail : tail.empty() ? head : head + " " + tail;
  };
  size_t count = std::max<size_t>(1, target / 2);
  PETREL_ASSIGN_OR_RETURN(size_t tokens, counter.Count(text_of(count)));
  for (int round = 0; round < 12 && tokens != target; ++round) {
    const double per_word = double(std::max<size_t>(tokens, 1)) / double(count + 1);
    const double shortfall = double(target) - double(tokens);
    long step = long(shortfall / per_word);
    if (step == 0) step = shortfall > 0 ? 1 : -1;
    const size_t next = size_t(std::clamp<long>(long(count) + step, 1, long(words.size())));
    if (next == count) break;
    PETREL_ASSIGN_OR_RETURN(const size_t next_tokens, counter.Count(text_of(next)));
    // Single steps that overshoot: settle on the count that reaches the target.
    if (std::abs(step) == 1 && (next_tokens > target) != (tokens > target)) {
      if (next_tokens >= target) {
        count = next;
        tokens = next_tokens;
      }
      break;
    }
    count = next;
    tokens = next_tokens;
  }
  return BenchPrompt{text_of(count), tokens};
}

}  // namespace

Result<std::vector<BenchPrompt>> BuildPromptSet(const std::string& url, const std::string& api_key,
                                                const PromptSetOptions& options) {
  TokenCounter counter(url, api_key);
  std::string prefix;
  if (options.shared_prefix_tokens > 0) {
    std::mt19937_64 rng(options.seed ^ 0x5bd1e995u);
    PETREL_ASSIGN_OR_RETURN(const BenchPrompt shared,
                            Fit(counter, "", Sentences(rng, 8 * options.shared_prefix_tokens + 16),
                                options.shared_prefix_tokens));
    prefix = shared.text;
  }
  std::vector<BenchPrompt> prompts;
  for (size_t i = 0; i < options.count; ++i) {
    std::mt19937_64 rng(options.seed * 1000003u + i);
    PETREL_ASSIGN_OR_RETURN(
        BenchPrompt prompt,
        Fit(counter, prefix, Sentences(rng, 8 * options.tokens + 16), options.tokens));
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

}  // namespace petrel::tools
