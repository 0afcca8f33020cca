// The habits people bring from llama.cpp: its multi-letter short flags mapped or warned about
// (never read as a letter plus a value), misspelled subcommands anywhere on the line, a fresh
// seed per run, -n -1 until the end of generation or a full context, quantize fallbacks named
// per tensor, errors that point to the fix (a missing chat template, invalid UTF-8), and the
// timing line of -v on its own line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "util/cli_runner.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;

bool Contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

std::string Story() { return testing::StoryF32Gguf(); }

nlohmann::json RunJson(const std::vector<std::string>& args) {
  Output output = Petrel(args);
  EXPECT_EQ(output.exit_code, 0) << output.err;
  return nlohmann::json::parse(output.out, nullptr, false);
}

TEST(CliHabitsTest, LlamaCppShortFlagsMeanWhatTheyMeanThere) {
  // -ngl is --gpu-layers (which, without --device, warns and is ignored): never "-n gl".
  Output ngl = Petrel({"run", "-m", Story(), "-p", "Once", "-n", "4", "--temp", "0", "-ngl", "99"});
  EXPECT_EQ(ngl.exit_code, 0) << ngl.err;
  EXPECT_TRUE(Contains(ngl.err, "--gpu-layers 99 has no effect without --device")) << ngl.err;
  // -s is --seed, -ctk/-ctv one cache type, -ub the micro-batch, -dev a device by llama.cpp's
  // name ("none": the CPU).
  const nlohmann::json seeded =
      RunJson({"run", "-m", Story(), "-p", "Once", "-n", "4", "-s", "7", "-ctk", "f32", "-ctv", "f32",
               "-ub", "64", "-dev", "none", "--json"});
  EXPECT_EQ(seeded["seed"], 7);
  // Different K and V types: petrel has one; an error naming both.
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-ctk", "f32", "-ctv", "f16"}),
                     "petrel stores K and V in one type");
}

TEST(CliHabitsTest, LlamaCppFlagsPetrelLacksAreOneWarningAndIgnored) {
  for (const std::vector<std::string>& flag : {std::vector<std::string>{"-fa", "on"},
                                               {"-fa"},
                                               {"--flash-attn", "auto"},
                                               {"-sm", "row"},
                                               {"-nkvo"},
                                               {"-tb", "2"}}) {
    std::vector<std::string> args = {"run", "-m", Story(), "-p", "Once", "-n", "2", "--temp", "0"};
    args.insert(args.end(), flag.begin(), flag.end());
    Output output = Petrel(args);
    EXPECT_EQ(output.exit_code, 0) << flag[0] << "\n" << output.err;
    EXPECT_TRUE(Contains(output.err, "warning: " + flag[0] + " is a llama.cpp option petrel does not have"))
        << output.err;
  }
  // --jinja: petrel always renders templates with its Jinja engine; accepted silently.
  Output jinja = Petrel({"run", "-m", Story(), "-p", "Once", "-n", "2", "--jinja"});
  EXPECT_EQ(jinja.exit_code, 0) << jinja.err;
  EXPECT_FALSE(Contains(jinja.err, "warning")) << jinja.err;
  // Any other multi-letter short word is an error, not a letter and a value.
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-xyz", "1"}), "unknown option '-xyz'");
  // Values glued to one-letter flags still work.
  Output glued = Petrel({"run", "-m", Story(), "-p", "Once", "-n2", "--temp", "0"});
  EXPECT_EQ(glued.exit_code, 0) << glued.err;
}

TEST(CliHabitsTest, LlamaCppPlacementFlagsArePetrelsAndCheckedBeforeLoading) {
  // -ot, -ts, -cmoe and -ncmoe are petrel's placement flags: their mistakes are one line.
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-ot", "exps=CPU"}),
                     "tensor override 'exps=CPU': the pattern matches no tensor of this model");
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-ot", "blk\\.0\\.=Vulkan7"}),
                     "is not a device of this run");
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-ot", "blk[=CPU"}),
                     "is not a regular expression");
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-ot", "attn_q"}),
                     "expected PATTERN=DEVICE");
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-ts", "3,1"}),
                     "--tensor-split has 2 shares for 1 device");
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-ts", "1,0"}),
                     "every share must be positive");
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "-ts", "1,-2"}),
                     "every share must be positive");
  // A rule that places blocks on the CPU when everything runs there anyway changes nothing.
  Output cpu = Petrel({"run", "-m", Story(), "-p", "Once", "-n", "2", "--temp", "0", "-ot",
                       "blk\\.[0-3]\\.ffn_.*=CPU", "-ncmoe", "1"});
  EXPECT_EQ(cpu.exit_code, 0) << cpu.err;
}

TEST(CliHabitsTest, ExpertsAndSplitsArePlacedOnTheRefBackendToo) {
  // The ref backend is a second backend on every machine: --n-cpu-moe keeps block 0's experts
  // on the CPU while both blocks run on ref, and a split shares the blocks between two devices.
  const std::string moe = testing::SharedDir() + "/models/synth-arch/qwen3moe.gguf";
  Output experts = Petrel({"-v", "run", "-m", moe, "-p", "Once", "-n", "4", "--temp", "0",
                           "--device", "ref", "--n-cpu-moe", "1"});
  ASSERT_EQ(experts.exit_code, 0) << experts.err;
  EXPECT_TRUE(Contains(experts.err, "placement layers 0-1: ref, output: ref")) << experts.err;
  EXPECT_TRUE(Contains(experts.err, "ffn_up_exps.weight of layer 0: cpu")) << experts.err;
  EXPECT_FALSE(Contains(experts.err, "of layers 0-1: cpu")) << experts.err;
  Output split = Petrel({"-v", "run", "-m", moe, "-p", "Once", "-n", "4", "--temp", "0",
                         "-dev", "none,ref", "-ts", "1,1"});
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_TRUE(Contains(split.err, "placement layers 0-0: cpu, layers 1-1: ref, output: ref"))
      << split.err;
}

TEST(CliHabitsTest, MisspelledSubcommandIsNamedWhereverItStands) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"serv", "-m", "x.gguf"}, {"-v", "srve", "-m", "x"}, {"rnu", "-p", "x"}}) {
    Output output = Petrel(args);
    ExpectOneLineError(output, "unknown subcommand '");
    EXPECT_TRUE(Contains(output.err, "did you mean ")) << output.err;
  }
}

TEST(CliHabitsTest, SeedIsFreshPerRunUnlessGiven) {
  const std::vector<std::string> args = {"run", "-m", Story(), "-p", "Once", "-n", "16", "--temp", "1.5", "--json"};
  const nlohmann::json a = RunJson(args), b = RunJson(args);
  ASSERT_TRUE(a.contains("seed") && b.contains("seed"));
  EXPECT_NE(a["seed"], b["seed"]);
  std::vector<std::string> fixed = args;
  fixed.insert(fixed.end(), {"--seed", "42"});
  const nlohmann::json c = RunJson(fixed), d = RunJson(fixed);
  EXPECT_EQ(c["seed"], 42);
  EXPECT_EQ(c["new_ids"], d["new_ids"]);
  // -v names the seed drawn.
  Output verbose = Petrel({"run", "-v", "-m", Story(), "-p", "Once", "-n", "2"});
  EXPECT_TRUE(Contains(verbose.err, "sampling: seed ")) << verbose.err;
}

TEST(CliHabitsTest, UnlimitedTokensStopAtAFullContextWithoutShifting) {
  const nlohmann::json out = RunJson({"run", "-m", Story(), "-p", "Once upon a time", "-n", "-1", "-c", "48",
                                      "--temp", "0", "--ignore-eos", "--json"});
  EXPECT_EQ(out["stop_reason"], "context");
  EXPECT_EQ(out["timings"]["context_shifts"], 0);
  // 48 tokens fill the cache; the last one is sampled from the logits of the full context.
  EXPECT_EQ(out["prompt_ids"].size() + out["new_ids"].size(), 48u + 1u);
  // Shifting only when asked.
  const nlohmann::json shifted = RunJson({"run", "-m", Story(), "-p", "Once upon a time", "-n", "60", "-c",
                                          "48", "--temp", "0", "--ignore-eos", "--json"});
  EXPECT_GE(shifted["timings"]["context_shifts"], 1);
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "--context-shift", "--no-context-shift"}),
                     "contradict");
}

TEST(CliHabitsTest, QuantizeNamesEachFallbackAndCountsThem) {
  const std::string work = testing::ScratchDir() + "/cli_habits_quantize";
  std::filesystem::create_directories(work);
  // The story model's rows (64 wide) hold no whole 256-element K-quant block.
  Output output = Petrel({"quantize", "--no-progress", Story(), work + "/q4k.gguf", "Q4_K"});
  EXPECT_EQ(output.exit_code, 0) << output.err;
  EXPECT_TRUE(Contains(output.err, "do not hold whole Q4_K blocks (256); written as")) << output.err;
  EXPECT_TRUE(Contains(output.err, "tensors were written in a fallback type")) << output.err;
}

TEST(CliHabitsTest, MissingChatTemplateNamesTheFlag) {
  // The story GGUF carries no template.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "-m", Story(), "-p", "Hi", "--chat", "-n", "2"},
        {"template", "-m", Story(), "--context", "/dev/null"}}) {
    ExpectOneLineError(Petrel(args), "--chat-template-file");
  }
}

TEST(CliHabitsTest, InvalidUtf8PromptIsAnErrorNamingTheOffset) {
  const std::string path = testing::ScratchDir() + "/cli_habits_bad_utf8.txt";
  std::ofstream(path, std::ios::binary) << "Once \xff upon";
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-f", path, "-n", "2"}), "byte offset 5");
  Output allowed = Petrel({"run", "-m", Story(), "-f", path, "-n", "2", "--allow-invalid-utf8"});
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_TRUE(Contains(allowed.err, "warning: ")) << allowed.err;
}

TEST(CliHabitsTest, UnspellableSchemaIsAnErrorBeforeGenerating) {
  ExpectOneLineError(Petrel({"run", "-m", Story(), "-p", "x", "--json-schema", R"({"enum": ["\u00e9"]})"}),
                     "U+00E9");
}

// The lines of `petrel bench --json`, each checked to be an object with a positive rate.
std::vector<nlohmann::json> BenchLines(const Output& output) {
  std::vector<nlohmann::json> rows;
  std::istringstream lines(output.out);
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << line;
    if (!j.is_object()) continue;
    EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0) << line;
    rows.push_back(std::move(j));
  }
  return rows;
}

// llama-bench's -d: tests after that many tokens in the cache, named "pp16 @ d64"; a depth beyond
// the context is an error, not a silent clamp.
TEST(CliHabitsTest, BenchDepthMeasuresAfterTokensInTheCache) {
  Output output = Petrel({"bench", "-m", Story(), "-p", "16", "-n", "4", "-d", "0,64", "-r", "1", "-t", "1",
                          "--json"});
  ASSERT_EQ(output.exit_code, 0) << output.err;
  std::vector<std::string> tests;
  for (const nlohmann::json& j : BenchLines(output)) {
    tests.push_back(j["test"]);
    EXPECT_EQ(j["n_depth"], tests.back().find("@ d64") != std::string::npos ? 64 : 0);
    // A decode step's read roof counts the cached rows it reads; a prompt's compute roof does
    // not count attention over the cache, so prompts after a depth have none.
    if (j["n_depth"] == 64) {
      EXPECT_EQ(j.contains("fraction_of_read_roof"), tests.back().rfind("tg", 0) == 0) << j;
    }
  }
  EXPECT_EQ(tests, (std::vector<std::string>{"pp16", "tg4", "pp16 @ d64", "tg4 @ d64"}));
  ExpectOneLineError(Petrel({"bench", "-m", Story(), "-p", "16", "-n", "0", "-d", "64", "-c", "32", "-r", "1"}),
                     "-d 64");
}

// llama-batched-bench's -npl as `--parallel` (and llama.cpp's -np): each test over that many
// sequences in the server's steps, named "pp16 b3"; a decode step's read roof then counts every
// sequence's cached rows and rates a step as that many tokens. Steps of several tokens of one
// sequence do not combine with it: an error, not a silently dropped flag.
TEST(CliHabitsTest, BenchParallelDecodesSequencesTogether) {
  Output output = Petrel({"bench", "-m", Story(), "-p", "16", "-n", "4", "-d", "8", "-np", "1,3",
                          "-r", "1", "-t", "1", "--json"});
  ASSERT_EQ(output.exit_code, 0) << output.err;
  std::vector<std::string> tests;
  std::map<size_t, size_t> kv_read;  // by sequences
  for (const nlohmann::json& j : BenchLines(output)) {
    tests.push_back(j["test"]);
    EXPECT_EQ(j["parallel"], tests.back().find(" b3") != std::string::npos ? 3 : 1) << j;
    if (tests.back().rfind("tg", 0) == 0) {
      kv_read[j["parallel"].get<size_t>()] = j["read_bytes"]["kv"].get<size_t>();
      EXPECT_GT(j["fraction_of_read_roof"].get<double>(), 0.0) << j;
    }
  }
  // The KV part of the roof: every sequence's 8 cached tokens plus half of the 4 new ones.
  EXPECT_GT(kv_read[1], 0u);
  EXPECT_EQ(kv_read[3], 3 * kv_read[1]);
  EXPECT_EQ(tests, (std::vector<std::string>{"pp16 @ d8", "tg4 @ d8", "pp16 b3 @ d8",
                                             "tg4 b3 @ d8"}));
  ExpectOneLineError(Petrel({"bench", "-m", Story(), "-p", "16", "-n", "4", "--parallel", "2",
                             "--step-tokens", "2", "-r", "1"}),
                     "--parallel 2 with --step-tokens 2");
}

// llama-bench's -ctk/-ctv lists: one engine per KV cache type, each line naming its type; K and V
// of different types are refused (petrel keeps them in one type).
TEST(CliHabitsTest, BenchCacheTypesAreAnAxis) {
  // (The story model's 16-wide heads are too narrow for a Q8_0 cache.)
  Output output = Petrel({"bench", "-m", Story(), "-p", "0", "-n", "2", "-ctk", "f32,f16", "-ctv",
                          "f32,f16", "-r", "1", "-t", "1", "--json"});
  ASSERT_EQ(output.exit_code, 0) << output.err;
  std::vector<std::string> types;
  for (const nlohmann::json& j : BenchLines(output)) {
    EXPECT_EQ(j["type_k"], j["type_v"]) << j;
    types.push_back(j["type_k"]);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"f32", "f16"}));
  ExpectOneLineError(Petrel({"bench", "-m", Story(), "-p", "0", "-n", "2", "-ctk", "f16", "-ctv",
                             "f32", "-r", "1"}),
                     "one type");
  ExpectOneLineError(Petrel({"bench", "-m", Story(), "-p", "0", "-n", "2", "--cache-type", "q4_9"}),
                     "q4_9");
}

}  // namespace
}  // namespace petrel
