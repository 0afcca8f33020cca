// The option checks of every `petrel` subcommand: each numeric range at its edges (accepted) and
// one step past them (a one-line error naming the flag, the value and the range), the flag
// combinations that are errors or warnings, the -t cap, thread-start failure, `info
// --cache-type`, and the token count of a prompt too long for the context.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/cli_runner.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;
using testing::StoryF32Gguf;

const char* kMissingModel = "/nonexistent/petrel-options-test.gguf";
const char* kDrop = "\x01";  // as a value in a case's flags: leave the flag out

int LineCount(const std::string& text) { return int(std::count(text.begin(), text.end(), '\n')); }

// Exit status 0 and exactly one warning line containing `needle` (other stderr lines, such as
// the timings, are not warnings).
void ExpectOneWarning(const Output& output, const std::string& needle) {
  EXPECT_EQ(output.exit_code, 0) << output.err;
  size_t warnings = 0, pos = 0;
  while ((pos = output.err.find("warning: ", pos)) != std::string::npos) {
    ++warnings;
    pos += 9;
  }
  EXPECT_EQ(warnings, 1u) << output.err;
  EXPECT_NE(output.err.find("warning: " + needle), std::string::npos) << output.err;
}

// One subcommand's arguments as flag -> value ("" for a bare flag), so that a case can replace
// one of them; `cheap_failure` replaces some to make the command fail right after parsing (a
// missing model), for edges whose accepted runs would be costly.
struct Command {
  std::string name;
  std::vector<std::pair<std::string, std::string>> base;
  std::pair<std::string, std::string> cheap_failure;
  std::string cheap_failure_needle;
  std::string stdin_text;
};

std::vector<std::string> Args(const Command& command,
                              const std::vector<std::pair<std::string, std::string>>& set,
                              bool cheap_failure) {
  std::vector<std::pair<std::string, std::string>> args = command.base;
  auto put = [&](const std::pair<std::string, std::string>& arg) {
    for (auto& existing : args) {
      if (existing.first == arg.first) {
        existing.second = arg.second;
        return;
      }
    }
    args.push_back(arg);
  };
  for (const auto& arg : set) put(arg);
  if (cheap_failure) put(command.cheap_failure);
  std::vector<std::string> out = {command.name};
  for (const auto& [flag, value] : args) {
    if (value == kDrop) continue;
    out.push_back(flag);
    if (!value.empty()) out.push_back(value);
  }
  return out;
}

Command RunCommand() {
  return {"run", {{"-m", StoryF32Gguf()}, {"-p", "hi"}, {"-n", "1"}, {"--temp", "0"}, {"-t", "1"}},
          {"-m", kMissingModel}, kMissingModel, ""};
}
// A minimal chat template (the story model has none).
std::string TemplateFile() {
  const std::string path = testing::ScratchDir() + "/options-template.jinja";
  std::ofstream(path) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  return path;
}

Command ChatCommand() {
  return {"chat",
          {{"-m", StoryF32Gguf()}, {"--chat-template-file", TemplateFile()}, {"-n", "1"}, {"-t", "1"}},
          {"-m", kMissingModel}, kMissingModel, "hello\n/exit\n"};
}
Command LogitsCommand() {
  return {"logits",
          {{"-m", StoryF32Gguf()}, {"--ids", "1,2"}, {"-o", testing::ScratchDir() + "/options_logits.bin"}, {"-t", "1"}},
          {"-m", kMissingModel}, kMissingModel, ""};
}
Command BenchCommand() {
  return {"bench", {{"-m", StoryF32Gguf()}, {"-p", "0"}, {"-n", "1"}, {"-r", "1"}, {"-t", "1"}},
          {"-m", kMissingModel}, kMissingModel, ""};
}
Command InfoCommand() { return {"info", {{"-m", StoryF32Gguf()}}, {"-m", kMissingModel}, kMissingModel, ""}; }
Command SynthCommand() {
  return {"synth", {{"--shape", "64x1x2x2x96"}, {"-o", testing::ScratchDir() + "/options_synth.gguf"}},
          {"--shape", "bogus"}, "bogus", ""};
}

struct RangeCase {
  std::string flag;       // as given on the command line
  std::string long_name;  // as errors name it
  std::string lo, hi;     // accepted edges
  std::vector<std::string> past;  // one step outside (and other rejected values)
  bool cheap_lo = true, cheap_hi = true;  // run the accepted edge for real
  std::vector<std::pair<std::string, std::string>> extra = {};  // flags the option needs
};

void CheckRange(const Command& command, const RangeCase& c) {
  SCOPED_TRACE(command.name + " " + c.flag);
  for (const auto& [value, real] : {std::pair{c.lo, c.cheap_lo}, std::pair{c.hi, c.cheap_hi}}) {
    auto set = c.extra;
    set.push_back({c.flag, value});
    const Output output = Petrel(Args(command, set, !real), command.stdin_text);
    if (real) {
      EXPECT_EQ(output.exit_code, 0) << c.flag << " " << value << ": " << output.err;
      EXPECT_EQ(output.err.find("error:"), std::string::npos) << output.err;
    } else {
      // Accepted by the check: the command gets as far as the (missing) model.
      ExpectOneLineError(output, command.cheap_failure_needle);
      EXPECT_EQ(output.err.find(c.long_name), std::string::npos) << c.flag << " " << value;
    }
  }
  for (const std::string& value : c.past) {
    auto set = c.extra;
    set.push_back({c.flag, value});
    const Output output = Petrel(Args(command, set, false), command.stdin_text);
    ExpectOneLineError(output, "error: " + c.long_name + ": ");
    EXPECT_NE(output.err.find(value), std::string::npos) << output.err;
    EXPECT_TRUE(output.err.find("range") != std::string::npos ||
                output.err.find("one of") != std::string::npos)
        << output.err;
  }
}

const std::string kMaxTokens = "1048576";

std::vector<RangeCase> ModelCases(bool threads) {
  std::vector<RangeCase> cases = {
      {"--gpu-layers", "--gpu-layers", "0", "100000", {"-1", "100001"}, true, true, {{"--device", "ref"}}},
      {"-c", "--ctx-size", "1", kMaxTokens, {"0", "1048577"}, false, false},
      {"-b", "--batch-size", "1", "65536", {"0", "65537"}, true, false},
      {"--ubatch-size", "--ubatch-size", "1", "65536", {"0", "65537"}, true, false, {{"-b", "65536"}}},
  };
  if (threads) cases.push_back({"-t", "--threads", "1", "1048576", {"0", "-1", "1048577", "x"}, true, true});
  return cases;
}

std::vector<RangeCase> SamplingCases() {
  return {
      {"-n", "--n-predict", "-1", kMaxTokens, {"-2", "1048577"}, true, false, {{"-c", "8"}}},
      {"--min-tokens", "--min-tokens", "0", kMaxTokens, {"-1", "1048577"}, true, false, {{"-n", "-1"}, {"-c", "8"}}},
      {"--temp", "--temp", "0", "100", {"-0.01", "100.5", "nan", "inf"}},
      {"--top-k", "--top-k", "0", kMaxTokens, {"-1", "1048577"}},
      {"--top-p", "--top-p", "0.001", "1", {"0", "1.01"}},
      {"--min-p", "--min-p", "0", "1", {"-0.01", "1.01"}},
      {"--typical", "--typical", "0.001", "1", {"0", "1.01"}},
      {"--dynatemp-range", "--dynatemp-range", "0", "100", {"-0.01", "100.5"}},
      {"--dynatemp-exp", "--dynatemp-exp", "0", "100", {"-0.01", "100.5"}, true, true, {{"--dynatemp-range", "0.5"}}},
      {"--xtc-probability", "--xtc-probability", "0", "1", {"-0.01", "1.01"}},
      {"--xtc-threshold", "--xtc-threshold", "0", "1", {"-0.01", "1.01"}, true, true, {{"--xtc-probability", "0.5"}}},
      {"--repeat-penalty", "--repeat-penalty", "0.001", "10", {"0", "10.01"}},
      {"--repeat-last-n", "--repeat-last-n", "-1", kMaxTokens, {"-2", "1048577"}},
      {"--presence-penalty", "--presence-penalty", "-2", "2", {"-2.01", "2.01"}},
      {"--frequency-penalty", "--frequency-penalty", "-2", "2", {"-2.01", "2.01"}},
      {"--dry-multiplier", "--dry-multiplier", "0", "100", {"-0.01", "100.5"}},
      {"--dry-base", "--dry-base", "1", "100", {"0.99", "100.5"}, true, true, {{"--dry-multiplier", "0.5"}}},
      {"--dry-allowed-length", "--dry-allowed-length", "0", kMaxTokens, {"-1", "1048577"}, true, true, {{"--dry-multiplier", "0.5"}}},
      {"--dry-penalty-last-n", "--dry-penalty-last-n", "-1", kMaxTokens, {"-2", "1048577"}, true, true, {{"--dry-multiplier", "0.5"}}},
      {"--mirostat", "--mirostat", "0", "2", {"-1", "1", "3"}},
      {"--mirostat-ent", "--mirostat-ent", "0.001", "100", {"0", "100.5"}, true, true, {{"--mirostat", "2"}}},
      {"--mirostat-lr", "--mirostat-lr", "0.001", "1", {"0", "1.01"}, true, true, {{"--mirostat", "2"}}},
      {"--seed", "--seed", "0", "9223372036854775807", {"-1", "9223372036854775808"}},
  };
}

TEST(CliOptions, RunRanges) {
  for (const RangeCase& c : ModelCases(true)) CheckRange(RunCommand(), c);
  for (const RangeCase& c : SamplingCases()) CheckRange(RunCommand(), c);
  CheckRange(RunCommand(), {"--n-probs", "--n-probs", "0", "100", {"-1", "101"}, true, true, {{"--json", ""}}});
  CheckRange(RunCommand(), {"--beams", "--beams", "1", "64", {"0", "65"}, true, true, {{"--temp", kDrop}}});
}

TEST(CliOptions, ChatRanges) {
  for (const RangeCase& c : ModelCases(true)) CheckRange(ChatCommand(), c);
  for (const RangeCase& c : SamplingCases()) CheckRange(ChatCommand(), c);
}

TEST(CliOptions, LogitsBenchInfoSynthRanges) {
  for (const RangeCase& c : ModelCases(true)) CheckRange(LogitsCommand(), c);
  for (const RangeCase& c : ModelCases(false)) CheckRange(BenchCommand(), c);
  CheckRange(BenchCommand(), {"-p", "--n-prompt", "0", kMaxTokens, {"-1", "1048577"}, true, false});
  CheckRange(BenchCommand(), {"-n", "--n-gen", "0", kMaxTokens, {"-1", "1048577"}, true, false, {{"-p", "1"}}});
  CheckRange(BenchCommand(), {"-t", "--threads", "1", "1048576", {"0", "1048577"}, true, true});
  CheckRange(BenchCommand(), {"-r", "--repetitions", "1", "1000", {"0", "1001"}, true, false});
  CheckRange(BenchCommand(), {"--step-tokens", "--step-tokens", "1", "64", {"0", "65"}, true, true});
  CheckRange(InfoCommand(), {"-c", "--ctx-size", "1", kMaxTokens, {"0", "1048577"}, true, true});
  CheckRange(InfoCommand(), {"--gpu-layers", "--gpu-layers", "0", "100000", {"-1", "100001"}, true, true,
                      {{"--device", "ref"}}});
  CheckRange(SynthCommand(), {"--n-vocab", "--n-vocab", "259", kMaxTokens, {"258", "1048577"}, true, false});
  CheckRange(SynthCommand(), {"--seed", "--seed", "0", "9223372036854775807", {"-1"}, true, true});
}

TEST(CliOptions, BenchListsCheckEveryElement) {
  ExpectOneLineError(Petrel(Args(BenchCommand(), {{"-p", "1,1048577"}}, false)),
                     "--n-prompt: 1048577 is outside the range [0, 1048576]");
  ExpectOneLineError(Petrel(Args(BenchCommand(), {{"-t", "1,0"}}, false)),
                     "--threads: 0 is outside the range [1, 1048576]");
}

TEST(CliOptions, RangesAreInTheHelp) {
  const Output run = Petrel({"run", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* text : {"[-1, 1048576]", "(0, 1]", "[0, 100]", "one of 0, 2", "[1, 64]"}) {
    EXPECT_NE(run.out.find(text), std::string::npos) << text;
  }
  const Output bench = Petrel({"bench", "--help"});
  EXPECT_NE(bench.out.find("[1, 1000]"), std::string::npos) << bench.out;
}

TEST(CliOptions, ForbiddenCombinationsAreErrors) {
  const std::string missing = testing::ScratchDir() + "/no-such-template.jinja";
  const std::string present = TemplateFile();
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--system", "be brief"}}, false)), "--system needs --chat");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--chat-template-file", present}}, false)),
                     "--chat-template-file needs --chat");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--chat", ""}, {"--chat-template-file", missing}}, false)),
                     "--chat-template-file: File does not exist: " + missing);
  ExpectOneLineError(Petrel(Args(ChatCommand(), {{"--chat-template-file", missing}}, false), "/exit\n"),
                     "--chat-template-file: File does not exist: " + missing);
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--length-penalty", "0.5"}}, false)),
                     "--length-penalty needs --beams");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--temp", kDrop}, {"--beams", "2"}, {"--top-k", "5"}}, false)),
                     "--top-k has no effect with --beams");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--temp", kDrop}, {"--beams", "2"}, {"-n", "0"}}, false)),
                     "--beams needs -n of at least 1");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--n-probs", "2"}}, false)), "--n-probs needs --json");
  ExpectOneLineError(Petrel(Args(ChatCommand(), {{"--n-probs", "2"}}, false), "/exit\n"),
                     "--n-probs has no effect in chat");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--min-tokens", "5"}, {"-n", "4"}}, false)),
                     "--min-tokens 5 is more than -n 4");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"-b", "8"}, {"--ubatch-size", "16"}}, false)),
                     "--ubatch-size 16 is larger than -b/--batch-size 8");
  ExpectOneLineError(Petrel(Args(SynthCommand(), {{"--vocab", StoryF32Gguf()}, {"--n-vocab", "300"}}, false)),
                     "--vocab excludes --n-vocab");
  // With --chat both are accepted.
  const Output chat = Petrel(Args(RunCommand(), {{"--chat", ""}, {"--system", "be brief"}, {"--chat-template-file", present}}, false));
  EXPECT_EQ(chat.exit_code, 0) << chat.err;
}

TEST(CliOptions, IgnoredCombinationsWarnOnce) {
  ExpectOneWarning(Petrel(Args(RunCommand(), {{"--gpu-layers", "99"}}, false)),
                   "--gpu-layers 99 has no effect without --device");
  ExpectOneWarning(Petrel(Args(InfoCommand(), {{"--gpu-layers", "99"}}, false)),
                   "--gpu-layers 99 has no effect without --device");
  const std::vector<std::pair<std::string, std::string>> dependents = {
      {"--dynatemp-exp", "--dynatemp-range"}, {"--xtc-threshold", "--xtc-probability"},
      {"--dry-base", "--dry-multiplier"},     {"--dry-allowed-length", "--dry-multiplier"},
      {"--dry-penalty-last-n", "--dry-multiplier"}, {"--mirostat-ent", "--mirostat"},
      {"--mirostat-lr", "--mirostat"}};
  for (const auto& [flag, stage] : dependents) {
    ExpectOneWarning(Petrel(Args(RunCommand(), {{flag, "1"}}, false)),
                     flag + " has no effect without " + stage);
  }
}

// --gpu-layers beyond a count, and --device with a device number, on a backend every build has.
TEST(CliOptions, GpuLayerRulesAndDeviceNumbers) {
  for (const char* layers : {"all", "half", "auto", "0", "1", "99"}) {
    for (const Command& command : {RunCommand(), LogitsCommand(), BenchCommand()}) {
      const Output output = Petrel(Args(command, {{"--device", "ref"}, {"--gpu-layers", layers}}, false));
      EXPECT_EQ(output.exit_code, 0) << command.name << " --gpu-layers " << layers << ": " << output.err;
    }
    const Output info = Petrel(Args(InfoCommand(), {{"--device", "ref"}, {"--gpu-layers", layers}}, false));
    EXPECT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find("device memory    ref plan"), std::string::npos) << info.out;
  }
  ExpectOneWarning(Petrel(Args(RunCommand(), {{"--gpu-layers", "auto"}}, false)),
                   "--gpu-layers auto has no effect without --device");
  EXPECT_EQ(Petrel(Args(RunCommand(), {{"--device", "ref:0"}}, false)).exit_code, 0);
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--device", "ref:1"}}, false)),
                     "--device ref:1: ref runs on the host and has only device 0");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--device", "ref:"}}, false)),
                     "--device: 'ref:' is not a device");
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"--device", "warp:0"}}, false)),
                     "--device: unknown device 'warp:0'");
  // info --devices needs no model; without it, info does.
  const Output devices = Petrel({"info", "--devices"});
  EXPECT_EQ(devices.exit_code, 0) << devices.err;
  EXPECT_NE(devices.out.find("cpu      host"), std::string::npos) << devices.out;
  EXPECT_NE(devices.out.find("ref      host"), std::string::npos) << devices.out;
  ExpectOneLineError(Petrel({"info"}), "--model is required");
}

TEST(CliOptions, ContextAboveTrainedWarns) {
  // The story model was trained on 512 tokens.
  ExpectOneWarning(Petrel(Args(RunCommand(), {{"-c", "1024"}}, false)),
                   "-c 1024 is above the 512 tokens the model was trained on");
  ExpectOneWarning(Petrel(Args(InfoCommand(), {{"-c", "1024"}}, false)),
                   "-c 1024 is above the 512 tokens the model was trained on");
  const Output at_limit = Petrel(Args(RunCommand(), {{"-c", "512"}}, false));
  EXPECT_EQ(at_limit.exit_code, 0);
  EXPECT_EQ(at_limit.err.find("warning:"), std::string::npos) << at_limit.err;
}

// --bf16-dot takes on or off; on, an F16 model runs (on `vdpbf16ps` where the CPU has it, else
// after one warning on the f32 path) and bench records which.
TEST(CliOptions, Bf16DotIsOnOrOff) {
  ExpectOneLineError(
      Petrel({"run", "-m", StoryF32Gguf(), "-p", "x", "-n", "1", "--bf16-dot", "yes"}),
      "--bf16-dot");
  const std::string f16 = testing::SharedDir() + "/models/story-gguf/story-f16.gguf";
  const Output bench = Petrel({"bench", "-m", f16, "-p", "24", "-n", "2", "-r", "1", "-t", "1",
                               "--bf16-dot", "on", "--json"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const auto line = nlohmann::json::parse(bench.out.substr(0, bench.out.find('\n')), nullptr, false);
  ASSERT_TRUE(line.is_object()) << bench.out;
  EXPECT_TRUE(line.contains("bf16_dot")) << bench.out;
  const Output off = Petrel({"run", "-m", f16, "-p", "Once", "-n", "2", "--temp", "0",
                             "--bf16-dot", "off"});
  EXPECT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.err.find("warning:"), std::string::npos) << off.err;
}

TEST(CliOptions, ThreadsAboveCpuCountAreCapped) {
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  const std::string expected = "-t 100000 is more than the " + std::to_string(cpus) +
                               " CPUs of this machine; using " + std::to_string(cpus);
  const Output run = Petrel(Args(RunCommand(), {{"-t", "100000"}}, false));
  ExpectOneWarning(run, expected);
  const Output bench = Petrel(Args(BenchCommand(), {{"-t", "100000"}, {"--json", ""}}, false));
  ExpectOneWarning(bench, expected);
  const auto line = nlohmann::json::parse(bench.out.substr(0, bench.out.find('\n')), nullptr, false);
  ASSERT_TRUE(line.is_object()) << bench.out;
  EXPECT_EQ(line["threads"], cpus);
}

TEST(CliOptions, ThreadStartFailureIsAnError) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two CPUs to start a worker";
  // A 4 TB stack limit: glibc sizes new threads' stacks from it, and the OS refuses the mapping.
  const char* bin_env = std::getenv("PETREL_BIN");
  const std::string bin = bin_env ? bin_env : "petrel";
  setenv("PETREL_BIN", "/bin/sh", 1);
  const Output output = Petrel({"-c", "ulimit -s 4000000000 && exec \"$0\" run -m \"$1\" -p hi -n 1 -t 2",
                                bin, StoryF32Gguf()});
  setenv("PETREL_BIN", bin.c_str(), 1);
  ExpectOneLineError(output, "error: cpu backend: cannot start 2 threads (1 started): ");
}

TEST(CliOptions, InfoCacheType) {
  ExpectOneLineError(Petrel(Args(InfoCommand(), {{"--cache-type", "bogus"}}, false)),
                     "--cache-type: bogus not in {f32,f16,q8_0}");
  // Heads of 32 elements hold one q8_0 block (34 bytes): 2 (K, V) x 1 layer x 100 tokens x
  // 2 KV heads x 34 bytes = 13600 bytes.
  const std::string path = testing::ScratchDir() + "/options_q8_kv.gguf";
  const Output synth = Petrel({"synth", "--shape", "64x1x2x2x96", "--n-vocab", "300", "-o", path});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const std::map<std::string, std::string> expected = {
      {"f32", "(f32) 50.00 KiB"}, {"f16", "(f16) 25.00 KiB"}, {"q8_0", "(q8_0) 13.28 KiB"}};
  for (const auto& [type, text] : expected) {
    const Output info = Petrel({"info", "-m", path, "-c", "100", "--cache-type", type});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find("KV cache for 100 tokens " + text), std::string::npos) << info.out;
  }
  // The story model's heads (16 elements) hold no whole q8_0 block.
  ExpectOneLineError(Petrel(Args(InfoCommand(), {{"--cache-type", "q8_0"}}, false)),
                     "--cache-type q8_0 needs heads of whole 32-element blocks");
}

TEST(CliOptions, PromptTooLongCountsTheWholePrompt) {
  std::string prompt;
  for (int i = 0; i < 20; ++i) prompt += "one two three four five six seven ";
  const Output tokens = Petrel({"tokenize", "-m", StoryF32Gguf(), prompt});
  ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
  const size_t n = nlohmann::json::parse(tokens.out).size();
  ASSERT_GT(n, 64u);
  const std::string needle = std::to_string(n) + " tokens exceed the context of 64";
  // Batches of 32: the prompt spans several before the context runs out.
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"-p", prompt}, {"-c", "64"}, {"-b", "32"}}, false)), needle);
  ExpectOneLineError(Petrel(Args(RunCommand(), {{"-p", prompt}, {"-c", "64"}, {"-b", "32"}, {"--temp", kDrop}, {"--beams", "2"}}, false)),
                     needle);
  std::string ids = "1";
  for (int i = 1; i < 100; ++i) ids += ",1";
  ExpectOneLineError(Petrel(Args(LogitsCommand(), {{"--ids", ids}, {"-c", "64"}, {"-b", "32"}}, false)),
                     "100 tokens exceed the context of 64");
}

}  // namespace
}  // namespace petrel
