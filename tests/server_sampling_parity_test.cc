// Sampler parity between `petrel serve` and `petrel run`: for every stage of the sampler chain,
// a /v1/completions request with the stage's request fields and a fixed seed generates the same
// tokens as `petrel run` with the stage's flags and that seed (temperature above 0, so the draw
// and every stage before it matter). The prompt goes to the server as `run`'s own token ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/cli_runner.h"
#include "util/server_process.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;

struct Case {
  const char* name;
  json fields;                     // request fields
  std::vector<std::string> flags;  // the same settings as `petrel run` flags
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Every case starts from these on both sides: the server's OpenAI defaults (no truncation)
// differ from the CLI's, so each is given.
const json kBase = {{"temperature", 0.9}, {"top_k", 0},   {"top_p", 1},
                    {"min_p", 0},         {"seed", 1234}, {"max_tokens", 24}};
const std::vector<std::string> kBaseFlags = {"--temp",  "0.9", "--top-k", "0",    "--top-p", "1",
                                             "--min-p", "0",   "--seed",  "1234", "-n",      "24"};

const Case kCases[] = {
    {"seed_only", json::object(), {}},
    {"temperature", {{"temperature", 1.7}}, {"--temp", "1.7"}},
    {"top_k", {{"top_k", 5}}, {"--top-k", "5"}},
    {"top_p", {{"top_p", 0.8}}, {"--top-p", "0.8"}},
    {"min_p", {{"min_p", 0.1}}, {"--min-p", "0.1"}},
    {"typical_p", {{"typical_p", 0.5}}, {"--typical", "0.5"}},
    {"top_n_sigma", {{"top_n_sigma", 1.0}}, {"--top-n-sigma", "1"}},
    {"dry",
     {{"dry_multiplier", 0.8},
      {"dry_base", 2.0},
      {"dry_allowed_length", 1},
      {"dry_penalty_last_n", 32}},
     {"--dry-multiplier", "0.8", "--dry-base", "2", "--dry-allowed-length", "1",
      "--dry-penalty-last-n", "32"}},
    {"dry_sequence_breakers",
     {{"dry_multiplier", 0.8}, {"dry_allowed_length", 1}, {"dry_sequence_breakers", {"e", ","}}},
     {"--dry-multiplier", "0.8", "--dry-allowed-length", "1", "--dry-sequence-breaker", "e",
      "--dry-sequence-breaker", ","}},
    {"xtc",
     {{"xtc_probability", 0.7}, {"xtc_threshold", 0.05}},
     {"--xtc-probability", "0.7", "--xtc-threshold", "0.05"}},
    {"mirostat",
     {{"mirostat", 2}, {"mirostat_tau", 3.0}, {"mirostat_eta", 0.2}},
     {"--mirostat", "2", "--mirostat-ent", "3", "--mirostat-lr", "0.2"}},
    {"dynatemp",
     {{"dynatemp_range", 0.5}, {"dynatemp_exponent", 1.5}},
     {"--dynatemp-range", "0.5", "--dynatemp-exp", "1.5"}},
    {"logit_bias", {{"logit_bias", {{"13", 5}, {"400", -3.5}}}}, {"-l", "13+5", "-l", "400-3.5"}},
    {"repeat_penalty",
     {{"repeat_penalty", 1.4}, {"repeat_last_n", 16}},
     {"--repeat-penalty", "1.4", "--repeat-last-n", "16"}},
    {"presence_frequency",
     {{"presence_penalty", 0.7}, {"frequency_penalty", 0.5}},
     {"--presence-penalty", "0.7", "--frequency-penalty", "0.5"}},
};

class ServerSamplingParityTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"-m", StoryF32Gguf(), "-c", "256"}); }
  static void TearDownTestSuite() {
    if (server_->ok()) {
      EXPECT_EQ(server_->Stop(), 0) << server_->log();
    }
    delete server_;
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()) << server_->log(); }
  static inline ServerProcess* server_ = nullptr;
};

TEST_P(ServerSamplingParityTest, ServerTokensEqualRun) {
  const Case& c = GetParam();
  std::vector<std::string> args = {
      "run", "-m", StoryF32Gguf(), "-c", "256", "--json", "-p", "Once upon a time, there was a"};
  // The base flags the case does not set itself (a flag given twice is an error).
  for (size_t i = 0; i + 1 < kBaseFlags.size(); i += 2) {
    if (std::find(c.flags.begin(), c.flags.end(), kBaseFlags[i]) != c.flags.end()) continue;
    args.insert(args.end(), {kBaseFlags[i], kBaseFlags[i + 1]});
  }
  args.insert(args.end(), c.flags.begin(), c.flags.end());
  const Output run = Petrel(args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json cli = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(cli.is_object()) << run.out;
  ASSERT_FALSE(cli["new_ids"].empty());

  json body = kBase;
  body.update(c.fields);
  body["prompt"] = cli["prompt_ids"];
  httplib::Client client = server_->Client();
  auto res = client.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json reply = json::parse(res->body);
  // The server reports text, not ids: the count, the text of `run`'s ids as the server decodes
  // them, and the stop reason pin the tokens down.
  EXPECT_EQ(reply["usage"]["completion_tokens"], cli["new_ids"].size()) << res->body;
  EXPECT_EQ(reply["choices"][0]["text"], cli["text"]) << res->body;
  auto detok =
      client.Post("/detokenize", json{{"tokens", cli["new_ids"]}}.dump(), "application/json");
  ASSERT_TRUE(detok);
  EXPECT_EQ(json::parse(detok->body)["content"], reply["choices"][0]["text"]);
  const std::string finish = reply["choices"][0]["finish_reason"];
  EXPECT_EQ(finish, cli["stop_reason"] == "length" ? "length" : "stop");
}

INSTANTIATE_TEST_SUITE_P(EveryStage, ServerSamplingParityTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

// Each stage's parameters change what is drawn (else the parity above proves little): a case
// differs from the seed-only run, on the server.
TEST_F(ServerSamplingParityTest, EveryStageChangesTheDraw) {
  httplib::Client client = server_->Client();
  auto text = [&](const json& fields) {
    json body = kBase;
    body.update(fields);
    body["prompt"] = "Once upon a time, there was a";
    auto res = client.Post("/v1/completions", body.dump(), "application/json");
    return res && res->status == 200
               ? json::parse(res->body)["choices"][0]["text"].get<std::string>()
               : std::string("<failed>");
  };
  const std::string plain = text(json::object());
  for (const Case& c : kCases) {
    if (c.fields.empty()) continue;
    EXPECT_NE(text(c.fields), plain) << c.name;
  }
}

}  // namespace
}  // namespace petrel::testing
