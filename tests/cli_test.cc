// The `petrel` command end to end: greedy runs against golden/story/greedy.jsonl, logits files,
// tokenize/info/synth/bench output, and one-line errors with exit status 1 on bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::SharedDir;

struct Output {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string Quote(const std::string& arg) {
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

Output Petrel(const std::vector<std::string>& args) {
  const char* bin = std::getenv("PETREL_BIN");
  std::string command = Quote(bin ? bin : "petrel");
  for (const std::string& arg : args) command += " " + Quote(arg);
  const std::string err_path = testing::ScratchDir() + "/petrel_cli_stderr_" + std::to_string(getpid());
  command += " 2>" + Quote(err_path);
  Output output;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  output.err.assign(std::istreambuf_iterator<char>(err), {});
  std::remove(err_path.c_str());
  return output;
}

std::string Story() { return SharedDir() + "/models/story"; }
std::string StoryGguf() { return SharedDir() + "/models/story-gguf/story-f32.gguf"; }

void ExpectOneLineError(const Output& output, const std::string& needle) {
  EXPECT_EQ(output.exit_code, 1) << output.err;
  EXPECT_EQ(output.err.rfind("error: ", 0), 0u) << output.err;
  EXPECT_EQ(std::count(output.err.begin(), output.err.end(), '\n'), 1) << output.err;
  EXPECT_NE(output.err.find(needle), std::string::npos) << output.err;
}

TEST(Cli, RunGreedyReproducesGoldenFromBothSources) {
  for (const std::string& model : {Story(), StoryGguf()}) {
    for (const auto& line : testing::ReadJsonLines(SharedDir() + "/golden/story/greedy.jsonl")) {
      const Output output = Petrel({"run", "-m", model, "-p", line["prompt"].get<std::string>(), "-n",
                                    "64", "--temp", "0", "-t", "2", "--json"});
      ASSERT_EQ(output.exit_code, 0) << output.err;
      const auto json = nlohmann::json::parse(output.out, nullptr, false);
      ASSERT_TRUE(json.is_object()) << output.out;
      EXPECT_EQ(json["prompt_ids"], line["prompt_ids"]) << model;
      EXPECT_EQ(json["new_ids"], line["new_ids"]) << model << " prompt " << line["prompt"];
      EXPECT_EQ(json["text"], line["text"]) << model;
      EXPECT_EQ(json["stop_reason"], line["stopped_at_eos"].get<bool>() ? "eos" : "length");
    }
  }
}

TEST(Cli, RunStreamsTextAndTimings) {
  const Output output = Petrel({"run", "-m", StoryGguf(), "-p", "Once upon a time", "-n", "8", "--temp", "0"});
  ASSERT_EQ(output.exit_code, 0) << output.err;
  EXPECT_FALSE(output.out.empty());
  EXPECT_NE(output.err.find("tokens/s"), std::string::npos) << output.err;
}

TEST(Cli, SeededSamplingIsReproducible) {
  std::vector<std::string> args = {"run", "-m", StoryGguf(), "-p", "The dog", "-n", "24", "--temp",
                                   "1.0", "--top-k", "50", "--top-p", "0.9", "--seed", "7", "--json"};
  const Output a = Petrel(args), b = Petrel(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["new_ids"], nlohmann::json::parse(b.out)["new_ids"]);
}

TEST(Cli, LogitsFileMatchesGolden) {
  const nlohmann::json cases = testing::ReadJson(SharedDir() + "/golden/story/logits.json");
  const auto& entry = cases[2];
  std::string ids;
  for (const auto& id : entry["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  const std::string out = testing::ScratchDir() + "/petrel_cli_logits.f32";
  for (const std::string& model : {Story(), StoryGguf()}) {
    const Output output = Petrel({"logits", "-m", model, "--ids", ids, "-o", out});
    ASSERT_EQ(output.exit_code, 0) << output.err;
    const auto stats = testing::CompareLogits(testing::ReadF32File(out),
        testing::ReadF32File(SharedDir() + "/golden/story/" + entry["file"].get<std::string>()), 2048);
    EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
  }
  std::remove(out.c_str());
}

TEST(Cli, TokenizeAndInfo) {
  const Output tokens = Petrel({"tokenize", "-m", Story(), "One day, Tim went to the park with his mom."});
  ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
  EXPECT_EQ(tokens.out, "[1,80,299,285,1482,1943,10]\n");
  const Output info = Petrel({"info", "-m", StoryGguf()});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("layers           2"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("KV cache"), std::string::npos) << info.out;
}

TEST(Cli, SynthWritesARunnableModel) {
  const std::string path = testing::ScratchDir() + "/petrel_cli_synth.gguf";
  const Output synth = Petrel({"synth", "--shape", "64x2x4x2x96", "--type", "f16", "--vocab", StoryGguf(), "-o", path});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const Output run = Petrel({"run", "-m", path, "-p", "Once", "-n", "4", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Output bench = Petrel({"bench", "-m", path, "-p", "16", "-n", "4", "-r", "2", "-t", "1,2", "--json"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(std::count(bench.out.begin(), bench.out.end(), '\n'), 4) << bench.out;
  std::remove(path.c_str());
}

// A 1.1B-parameter F16 model (2.2 GB): the weights must be used from the mapping, so peak RSS
// stays below the file size + 15 % (a copy would double it).
TEST(Cli, TinyllamaF16WeightsAreMappedNotCopied) {
  const std::string path = testing::ScratchDir() + "/petrel_cli_tinyllama_f16.gguf";
  const Output synth = Petrel({"synth", "--shape", "tinyllama", "--type", "f16", "--vocab",
                               SharedDir() + "/golden/tokenizer/ggml-vocab-llama-spm.gguf", "-o", path});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  const double file_bytes = double(file.tellg());
  const Output run = Petrel({"run", "-m", path, "-p", "Hello world", "-n", "4", "-c", "256", "-t", "2", "--json"});
  std::remove(path.c_str());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  const double rss = json["timings"]["peak_rss_bytes"].get<double>();
  std::printf("tinyllama F16: file %.0f MB, peak RSS %.0f MB (%.3f x file)\n", file_bytes / 1e6, rss / 1e6, rss / file_bytes);
  EXPECT_LT(rss, file_bytes * 1.15);
  EXPECT_GT(rss, file_bytes * 0.5);  // the weights were really read
}

TEST(Cli, BadInputGivesOneLineErrors) {
  ExpectOneLineError(Petrel({"run", "-m", "/nonexistent/model.gguf", "-p", "x"}), "no such file");
  const std::string junk = testing::ScratchDir() + "/petrel_cli_junk.gguf";
  { std::ofstream(junk) << "GGUF\x03\0\0\0 truncated"; }
  ExpectOneLineError(Petrel({"run", "-m", junk, "-p", "x"}), "gguf");
  { std::ofstream(junk) << "not a model at all"; }
  ExpectOneLineError(Petrel({"info", "-m", junk}), "magic");
  std::remove(junk.c_str());
  ExpectOneLineError(Petrel({"logits", "-m", StoryGguf(), "--ids", "1,x", "-o", "/dev/null"}), "--ids");
  ExpectOneLineError(Petrel({"logits", "-m", StoryGguf(), "--ids", "1,99999", "-o", "/dev/null"}), "vocabulary");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "--device", "warp"}), "unknown device");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "--cache-type", "q3"}), "cache-type");
  ExpectOneLineError(Petrel({"synth", "--shape", "7x1", "-o", "/dev/null"}), "shape");
  ExpectOneLineError(Petrel({"frobnicate"}), "");
}

}  // namespace
}  // namespace petrel
