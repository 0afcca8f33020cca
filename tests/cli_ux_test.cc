// The `petrel` command as users meet it: --version and help, suggestions for misspelled options
// and subcommands, -v, -e escapes, -f prompt files, --special and end-of-generation text,
// Ctrl-C during `run`, and every example of README.md's "Using petrel" block run as written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
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
using testing::StoryHf;

bool Contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

nlohmann::json RunJson(const std::vector<std::string>& args) {
  Output output = Petrel(args);
  EXPECT_EQ(output.exit_code, 0) << output.err;
  return nlohmann::json::parse(output.out, nullptr, false);
}

TEST(CliUxTest, VersionPrintsVersionRevisionTargetAndBackends) {
  for (const char* flag : {"--version", "version"}) {
    Output output = Petrel({flag});
    EXPECT_EQ(output.exit_code, 0) << output.err;
    EXPECT_EQ(output.out.rfind("petrel 0.", 0), 0u) << output.out;
    EXPECT_TRUE(Contains(output.out, "(git ")) << output.out;
    EXPECT_TRUE(Contains(output.out, "SIMD target: ")) << output.out;
    EXPECT_TRUE(Contains(output.out, "backends: cpu")) << output.out;
    EXPECT_TRUE(output.err.empty()) << output.err;
  }
}

TEST(CliUxTest, HelpGoesToStdoutAndNoArgumentsToStderrWithStatusOne) {
  Output help = Petrel({"help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_TRUE(Contains(help.out, "Usage: petrel")) << help.out;
  EXPECT_TRUE(Contains(help.out, "run")) << help.out;
  EXPECT_TRUE(Contains(help.out, "--version")) << help.out;

  Output run_help = Petrel({"help", "run"});
  EXPECT_EQ(run_help.exit_code, 0) << run_help.err;
  EXPECT_TRUE(Contains(run_help.out, "Usage: petrel run")) << run_help.out;
  EXPECT_TRUE(Contains(run_help.out, "--escape")) << run_help.out;

  Output bare = Petrel({});
  EXPECT_EQ(bare.exit_code, 1);
  EXPECT_TRUE(bare.out.empty()) << bare.out;
  EXPECT_TRUE(Contains(bare.err, "Usage: petrel")) << bare.err;

  ExpectOneLineError(Petrel({"help", "rnu"}), "unknown subcommand 'rnu'; did you mean run?");
  ExpectOneLineError(Petrel({"help", "frobnicate"}), "unknown subcommand 'frobnicate' (see petrel help)");
  ExpectOneLineError(Petrel({"-v"}), "a subcommand is required (see petrel help)");
}

TEST(CliUxTest, UnknownSubcommandNamesTheClosest) {
  ExpectOneLineError(Petrel({"rnu"}), "unknown subcommand 'rnu'; did you mean run?");
  ExpectOneLineError(Petrel({"tokenise"}), "did you mean tokenize?");
  ExpectOneLineError(Petrel({"frobnicate"}), "unknown subcommand 'frobnicate' (see petrel help)");
}

TEST(CliUxTest, UnknownOptionNamesTheClosest) {
  const std::string model = StoryHf();
  ExpectOneLineError(Petrel({"run", "-m", model, "--tmp", "0"}),
                     "unknown option '--tmp' for 'petrel run'; did you mean --temp?");
  ExpectOneLineError(Petrel({"run", "-m", model, "--temperature=0"}),
                     "unknown option '--temperature' for 'petrel run'; did you mean --temp?");
  ExpectOneLineError(Petrel({"run", "-m", model, "--n-predcit", "4"}), "did you mean --n-predict?");
  // Named before the "--model is required" it causes.
  ExpectOneLineError(Petrel({"run", "--modle", model, "-p", "hi"}),
                     "unknown option '--modle' for 'petrel run'; did you mean --model?");
  ExpectOneLineError(Petrel({"chat", "-m", model, "--sytem", "x"}),
                     "unknown option '--sytem' for 'petrel chat'; did you mean --system?");
  ExpectOneLineError(Petrel({"--verbos", "version"}), "unknown option '--verbos' for 'petrel'; did you mean --verbose?");
  ExpectOneLineError(Petrel({"run", "-m", model, "--zzzzzzzz"}),
                     "unknown option '--zzzzzzzz' for 'petrel run' (see petrel run --help)");
  ExpectOneLineError(Petrel({"run", "-m", model, "hello"}),
                     "unexpected argument 'hello' for 'petrel run' (see petrel run --help)");
}

TEST(CliUxTest, VerboseLogsLoadDetailsAndTimings) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "-v", "-m", StoryHf(), "-p", "Once", "-n", "4", "--temp", "0"},
        std::vector<std::string>{"-v", "run", "-m", StoryHf(), "-p", "Once", "-n", "4", "--temp", "0"}}) {
    Output output = Petrel(args);
    EXPECT_EQ(output.exit_code, 0) << output.err;
    for (const char* needle : {"load: ", "(safetensors)", "architecture llama", "tensors", "MiB of weights",
                               "KV cache", "placement", "SIMD target", "micro-batch", "tokenizer 2048 tokens",
                               " s; generation: 4 tokens in"}) {
      EXPECT_TRUE(Contains(output.err, needle)) << needle << "\n" << output.err;
    }
  }
  Output quiet = Petrel({"run", "-m", StoryHf(), "-p", "Once", "-n", "4", "--temp", "0"});
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_FALSE(Contains(quiet.err, "load: ")) << quiet.err;
}

TEST(CliUxTest, EscapesApplyToStopStringsAndPromptsOnlyWithE) {
  // The greedy continuation of this prompt has a line that starts with a quote.
  const std::vector<std::string> base = {"run", "-m", StoryHf(), "-p", "Tom and Sam", "--temp", "0",
                                         "-n", "300", "--json", "--stop", "\\n\""};
  std::vector<std::string> escaped = base;
  escaped.push_back("-e");
  const nlohmann::json stopped = RunJson(escaped);
  EXPECT_EQ(stopped["stop_reason"], "stop");
  EXPECT_EQ(stopped["stop_string"], "\n\"");
  EXPECT_FALSE(Contains(stopped["text"].get<std::string>(), "\n"));

  const nlohmann::json literal = RunJson(base);
  EXPECT_NE(literal["stop_reason"], "stop");
  EXPECT_TRUE(Contains(literal["text"].get<std::string>(), "\n\""));

  const std::vector<std::string> prompt = {"run", "-m", StoryHf(), "-n", "1", "--temp", "0", "--json", "-p"};
  std::vector<std::string> tab_escape = prompt, tab = prompt, backslash = prompt;
  tab_escape.insert(tab_escape.end(), {"Tom\\tand\\x21", "-e"});
  tab.push_back("Tom\tand!");
  backslash.push_back("Tom\\tand\\x21");
  EXPECT_EQ(RunJson(tab_escape)["prompt_ids"], RunJson(tab)["prompt_ids"]);
  EXPECT_NE(RunJson(backslash)["prompt_ids"], RunJson(tab)["prompt_ids"]);
  // Unknown escapes, a \x without digits and a final backslash stay as written.
  std::vector<std::string> odd_escape = prompt, odd = prompt;
  odd_escape.insert(odd_escape.end(), {"a\\qb\\xg\\", "-e"});
  odd.push_back("a\\qb\\xg\\");
  EXPECT_EQ(RunJson(odd_escape)["prompt_ids"], RunJson(odd)["prompt_ids"]);
  // -e applies to a prompt file too.
  const std::string file = testing::ScratchDir() + "/cli_ux_escaped_prompt.txt";
  std::ofstream(file) << "Tom\\tand\\x21";
  std::vector<std::string> file_escape = prompt;
  file_escape.back() = "-f";
  file_escape.insert(file_escape.end(), {file, "-e"});
  EXPECT_EQ(RunJson(file_escape)["prompt_ids"], RunJson(tab)["prompt_ids"]);
}

TEST(CliUxTest, PromptFromFile) {
  const std::string path = testing::ScratchDir() + "/cli_ux_prompt.txt";
  std::ofstream(path) << "Tom and Sam";
  const std::vector<std::string> common = {"run", "-m", StoryHf(), "-n", "4", "--temp", "0", "--json"};
  std::vector<std::string> from_file = common, from_flag = common;
  from_file.insert(from_file.end(), {"-f", path});
  from_flag.insert(from_flag.end(), {"-p", "Tom and Sam"});
  const nlohmann::json a = RunJson(from_file), b = RunJson(from_flag);
  EXPECT_EQ(a["prompt_ids"], b["prompt_ids"]);
  EXPECT_EQ(a["new_ids"], b["new_ids"]);

  const std::string missing = testing::ScratchDir() + "/cli_ux_no_such_prompt.txt";
  ExpectOneLineError(Petrel({"run", "-m", StoryHf(), "-f", missing}),
                     "-f " + missing + ": cannot open the prompt file");
  ExpectOneLineError(Petrel({"run", "-m", StoryHf(), "-f", path, "-p", "hi"}), "--prompt excludes --file");
}

TEST(CliUxTest, EndOfGenerationTextIsLeftOutOfTheStreamUnlessSpecial) {
  // The story model spells "<|end_story|>" out in plain tokens, then emits the end token.
  for (const char* prompt : {"Once upon a time", "The cat saw a mouse."}) {
    const std::vector<std::string> args = {"run", "-m", StoryHf(), "-p", prompt, "--temp", "0", "-n", "300"};
    Output streamed = Petrel(args);
    EXPECT_EQ(streamed.exit_code, 0) << streamed.err;
    EXPECT_TRUE(Contains(streamed.err, "stop: eos")) << streamed.err;
    EXPECT_FALSE(Contains(streamed.out, "<|")) << streamed.out;

    // --json "text" is the reference decode of new_ids: the spelled-out marker stays.
    std::vector<std::string> json_args = args;
    json_args.push_back("--json");
    const nlohmann::json plain = RunJson(json_args);
    EXPECT_EQ(plain["stop_reason"], "eos");
    EXPECT_EQ(plain["new_ids"].back(), 2);
    const std::string text = plain["text"].get<std::string>();
    EXPECT_EQ(text.substr(text.size() - 13), "<|end_story|>");

    // --special: the spelled-out marker and the end token's own text.
    json_args.push_back("--special");
    const nlohmann::json special = RunJson(json_args);
    EXPECT_EQ(special["new_ids"], plain["new_ids"]);
    EXPECT_EQ(special["text"], text + "<|end_story|>");
    std::vector<std::string> special_stream = args;
    special_stream.push_back("--special");
    EXPECT_EQ(Petrel(special_stream).out, text + "<|end_story|>\n");
  }
}

TEST(CliUxTest, InterruptStopsRunWithStatsAndStatus130) {
  const char* bin = std::getenv("PETREL_BIN");
  ASSERT_NE(bin, nullptr);
  const std::string err_path = testing::ScratchDir() + "/cli_ux_sigint_stderr";
  int out_pipe[2];
  ASSERT_EQ(pipe(out_pipe), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(err, STDERR_FILENO);
    close(out_pipe[0]);
    const std::string model = StoryHf();
    execl(bin, bin, "run", "-m", model.c_str(), "-p", "Once upon a time", "-n", "100000", "--ignore-eos",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out_pipe[1]);
  std::string out;
  char buffer[4096];
  ssize_t n = read(out_pipe[0], buffer, sizeof(buffer));
  ASSERT_GT(n, 0);
  out.append(buffer, size_t(n));
  kill(pid, SIGINT);
  while ((n = read(out_pipe[0], buffer, sizeof(buffer))) > 0) out.append(buffer, size_t(n));
  close(out_pipe[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::ifstream err_file(err_path);
  const std::string err((std::istreambuf_iterator<char>(err_file)), {});
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 130) << err;
  EXPECT_TRUE(Contains(err, "stop: cancelled")) << err;
  EXPECT_TRUE(Contains(err, "generation: ")) << err;
  EXPECT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');  // the text so far, then the usual final newline
}

// The story model with a chat template, so that the chat examples run too.
std::string StoryWithChatTemplate(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                           "tokenizer.json"}) {
    std::error_code ignored;
    fs::remove(dir + "/" + name, ignored);
    fs::create_symlink(StoryHf() + "/" + name, dir + "/" + name);
  }
  std::ifstream in(StoryHf() + "/tokenizer_config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["chat_template"] =
      "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
      "{% if add_generation_prompt %}assistant:{% endif %}";
  std::ofstream(dir + "/tokenizer_config.json") << config.dump();
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(CliUxTest, ChatEscapesTheSystemPromptWithE) {
  const std::string model = StoryWithChatTemplate(testing::ScratchDir() + "/cli_ux_chat/story-chat");
  const std::string session = testing::ScratchDir() + "/cli_ux_chat/session.bin";
  for (const bool escape : {true, false}) {
    std::vector<std::string> args = {"chat", "-m", model, "--system", "Be\\tterse.", "-n", "4"};
    if (escape) args.push_back("-e");
    Output output = Petrel(args, "/save " + session + "\n/exit\n");
    EXPECT_EQ(output.exit_code, 0) << output.err;
    // The session's metadata is JSON: a tab is written as \t, a backslash as \\.
    const std::string saved = ReadFile(session);
    EXPECT_EQ(Contains(saved, "\"system\":\"Be\\tterse.\""), escape) << saved.substr(0, 200);
    EXPECT_EQ(Contains(saved, "\"system\":\"Be\\\\tterse.\""), !escape);
  }
}

// Every `petrel …` line of README.md's "Using petrel" block, as written: MODEL is the story model
// (MODEL.gguf and VOCAB.gguf its GGUF file), BERT.gguf the synthetic encoder; the files the
// examples read (prompt.txt, lines.txt, ctx.json, text.txt) are made in a scratch working
// folder, where they also write theirs.
TEST(CliUxTest, ReadmeExamplesRun) {
  const char* source = std::getenv("PETREL_SOURCE_DIR");
  ASSERT_NE(source, nullptr);
  std::ifstream readme(std::string(source) + "/README.md");
  ASSERT_TRUE(readme) << source;
  std::vector<std::string> examples;
  std::string line;
  bool in_section = false, in_block = false;
  while (std::getline(readme, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Using `petrel`";
    if (!in_section) continue;
    if (line.rfind("```", 0) == 0) {
      if (in_block) break;
      in_block = true;
      continue;
    }
    if (in_block && line.rfind("petrel ", 0) == 0) examples.push_back(line);
  }
  ASSERT_GE(examples.size(), 15u);

  const std::string work = testing::ScratchDir() + "/cli_ux_readme";
  std::filesystem::create_directories(work);
  const std::string model = StoryWithChatTemplate(work + "/story-chat");
  std::ofstream(work + "/prompt.txt") << "Once upon a time";
  std::ofstream(work + "/lines.txt") << "Once upon a time\nA cat sat on the mat\n";
  std::ofstream(work + "/text.txt") << ReadFile(testing::SharedDir() + "/golden/perplexity/stories.txt");
  std::ofstream(work + "/ctx.json")
      << R"({"messages": [{"role": "user", "content": "Hi!"}], "add_generation_prompt": true})";
  const std::vector<std::pair<std::string, std::string>> placeholders = {
      {"MODEL.gguf", testing::StoryF32Gguf()},
      {"VOCAB.gguf", testing::StoryF32Gguf()},
      {"BERT.gguf", testing::SharedDir() + "/models/synth-arch2/bert.gguf"},
      {"MODEL", model}};
  for (const std::string& example : examples) {
    std::string command = testing::Quote(std::getenv("PETREL_BIN")) + example.substr(6);
    for (const auto& [name, value] : placeholders) {
      for (size_t at = command.find(name); at != std::string::npos; at = command.find(name, at + value.size())) {
        command.replace(at, name.size(), value);
      }
    }
    const std::string shell = "cd " + testing::Quote(work) + " && " + command + " </dev/null >/dev/null 2>" +
                              testing::Quote(work + "/stderr");
    const int status = std::system(shell.c_str());
    std::ifstream err(work + "/stderr");
    const std::string err_text((std::istreambuf_iterator<char>(err)), {});
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << example << "\n" << err_text;
  }
}

}  // namespace
}  // namespace petrel
