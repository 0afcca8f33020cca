// Injected failures in every file petrel writes: the open of the temporary, a write (a full
// disk's short write then ENOSPC, or EIO), the fsync and the rename each fail in turn through an
// LD_PRELOAD library (tests/util/fault_shim.c). Each time the destination, which existed, must
// be byte for byte what it was, no temporary may be left, and the command must say in one error
// line what failed (the chat's /save says it and the chat goes on).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "util/cli_runner.h"

namespace petrel {
namespace {

namespace fs = std::filesystem;
using testing::Output;
using testing::Petrel;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> Temporaries(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".petrel-tmp-") != std::string::npos) found.push_back(name);
  }
  return found;
}

// Exit status 1 and one "error: " line, the last, naming `output` (the progress lines of
// imatrix and perplexity come before it).
void ExpectOneErrorLine(const Output& result, const std::string& output) {
  EXPECT_EQ(result.exit_code, 1) << result.err;
  std::vector<std::string> lines;
  for (size_t start = 0, end; start < result.err.size(); start = end + 1) {
    end = result.err.find('\n', start);
    if (end == std::string::npos) end = result.err.size();
    lines.push_back(result.err.substr(start, end - start));
  }
  size_t errors = 0;
  for (const std::string& line : lines) errors += line.find("error: ") != std::string::npos;
  EXPECT_EQ(errors, 1u) << result.err;
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("error: " + output + ": ", 0), 0u) << result.err;
}

std::string Stories() { return testing::SharedDir() + "/golden/perplexity/stories.txt"; }

// One writer: the arguments that write `output` (files it needs go in `dir`), and whether it is
// the chat, whose /save reports an error and carries on.
struct Writer {
  std::string name;
  std::function<std::vector<std::string>(const std::string& dir, const std::string& output)> args;
  std::string stdin_text;  // with `output` in place of OUTPUT
  bool chat = false;
};

std::vector<Writer> Writers() {
  const std::string story = testing::StoryF32Gguf();
  return {
      // Through the GGUF writer; F16 makes a file of several writes (1.3 MB).
      {"quantize",
       [=](const std::string&, const std::string& out) {
         return std::vector<std::string>{"quantize", story, out, "F16", "--no-progress"};
       },
       "", false},
      {"synth",
       [](const std::string&, const std::string& out) {
         return std::vector<std::string>{"synth", "--shape", "64x2x4x2x96", "-o", out};
       },
       "", false},
      {"logits",
       [=](const std::string&, const std::string& out) {
         return std::vector<std::string>{"logits", "-m", story, "--ids", "1,2,3", "-o", out};
       },
       "", false},
      {"imatrix",
       [=](const std::string&, const std::string& out) {
         return std::vector<std::string>{"imatrix", "-m", story, "-f", Stories(), "-c", "128",
                                         "--chunks", "1", "-t", "2", "-o", out};
       },
       "", false},
      {"kld-base",
       [=](const std::string&, const std::string& out) {
         return std::vector<std::string>{"perplexity", "-m", story, "-f", Stories(), "-c", "128",
                                         "-t", "2", "--kl-divergence-base", out};
       },
       "", false},
      {"embed",
       [](const std::string&, const std::string& out) {
         return std::vector<std::string>{
             "embed", "-m", testing::SharedDir() + "/models/synth-arch2/bert.gguf", "-p",
             "one line\nanother line", "-o", out};
       },
       "", false},
      {"session",
       [=](const std::string& dir, const std::string&) {
         const std::string chat_template = dir + "/chat.jinja";
         std::ofstream(chat_template)
             << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant:{% endif %}";
         return std::vector<std::string>{"chat", "-m", story, "--chat-template-file",
                                         chat_template, "-n", "4", "--temp", "0", "-t", "2"};
       },
       "Once upon a time\n/save OUTPUT\n", true},
  };
}

struct Fault {
  std::string call, error, after;
  bool short_write;
  std::string message;  // what the error line must say
};

std::vector<Fault> Faults() {
  return {
      {"open", "ENOSPC", "0", false, "cannot create a file in"},
      {"write", "ENOSPC", "0", true, "write failed: No space left on device"},
      {"write", "EIO", "0", false, "write failed: Input/output error"},
      {"fsync", "EIO", "0", false, "write failed: Input/output error"},
      {"rename", "EACCES", "0", false, "cannot replace: Permission denied"},
  };
}

class WriteFailures : public ::testing::TestWithParam<size_t> {};

TEST_P(WriteFailures, LeaveTheDestinationAsItWasAndSayWhatFailed) {
  const char* shim = std::getenv("PETREL_FAULT_SHIM");
  ASSERT_NE(shim, nullptr) << "PETREL_FAULT_SHIM is set by tests/meson.build";
  const Writer writer = Writers()[GetParam()];
  const std::string dir = testing::ScratchDir() + "/petrel_faults_" + std::to_string(getpid()) +
                          "_" + writer.name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string output = dir + "/out.bin";
  const std::string original = "what was there before\n";
  const std::vector<std::string> args = writer.args(dir, output);
  std::string input = writer.stdin_text;
  if (size_t at = input.find("OUTPUT"); at != std::string::npos) input.replace(at, 6, output);

  // Without a fault the writer writes the file (so each fault below has something to stop).
  std::ofstream(output) << original;
  const Output clean = Petrel(args, input);
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  ASSERT_NE(ReadBytes(output), original) << writer.name << " did not write " << output;

  for (const Fault& fault : Faults()) {
    SCOPED_TRACE(writer.name + ": " + fault.call + " fails with " + fault.error +
                 (fault.short_write ? " after a short write" : ""));
    { std::ofstream(output, std::ios::trunc) << original; }
    setenv("LD_PRELOAD", shim, 1);
    setenv("PETREL_FAULT_PATH", dir.c_str(), 1);
    setenv("PETREL_FAULT_CALL", fault.call.c_str(), 1);
    setenv("PETREL_FAULT_ERRNO", fault.error.c_str(), 1);
    setenv("PETREL_FAULT_AFTER", fault.after.c_str(), 1);
    if (fault.short_write) setenv("PETREL_FAULT_SHORT", "1", 1);
    const Output failed = Petrel(args, input);
    for (const char* name : {"LD_PRELOAD", "PETREL_FAULT_PATH", "PETREL_FAULT_CALL",
                             "PETREL_FAULT_ERRNO", "PETREL_FAULT_AFTER", "PETREL_FAULT_SHORT"})
      unsetenv(name);
    if (writer.chat) {
      // The chat reports the failed /save and goes on to the end of its input.
      EXPECT_EQ(failed.exit_code, 0) << failed.err;
      size_t errors = 0;
      for (size_t at = failed.err.find("error: "); at != std::string::npos;
           at = failed.err.find("error: ", at + 1))
        ++errors;
      EXPECT_EQ(errors, 1u) << failed.err;
      EXPECT_EQ(failed.err.find("[saved to"), std::string::npos) << failed.err;
    } else {
      ExpectOneErrorLine(failed, output);
    }
    EXPECT_NE(failed.err.find(fault.message), std::string::npos) << failed.err;
    EXPECT_EQ(ReadBytes(output), original) << "the destination must stay byte for byte";
    EXPECT_TRUE(Temporaries(dir).empty());
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(EveryWriter, WriteFailures, ::testing::Range<size_t>(0, Writers().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string name = Writers()[info.param].name;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace petrel
