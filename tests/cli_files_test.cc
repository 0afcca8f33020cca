// What `petrel` writes, end to end: outputs that are an input are refused, failures and kills
// never damage a destination, quantize shows progress only on a terminal, and sessions refuse a
// model other than the one they were saved with.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "util/cli_runner.h"

namespace petrel {
namespace {

namespace fs = std::filesystem;
using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;

std::string Bin() {
  const char* bin = std::getenv("PETREL_BIN");
  return bin ? bin : "petrel";
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A fresh, empty folder under the scratch folder for one test.
std::string FreshDir(const std::string& name) {
  const std::string dir =
      testing::ScratchDir() + "/petrel_files_" + std::to_string(getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Names in `dir` that look like a petrel temporary (".<name>.petrel-tmp-<pid>").
std::vector<std::string> Temporaries(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".petrel-tmp-") != std::string::npos) found.push_back(name);
  }
  return found;
}

std::string ChatTemplate(const std::string& dir) {
  const std::string path = dir + "/chat.jinja";
  std::ofstream(path) << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}";
  return path;
}

// Runs `args` on a pseudo-terminal (so stderr is a terminal) and returns all it printed.
std::string RunOnTerminal(const std::vector<std::string>& args, int* exit_code) {
  int fd = -1;
  const pid_t pid = forkpty(&fd, nullptr, nullptr, nullptr);
  if (pid == 0) {
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::string transcript;
  if (pid < 0) return transcript;
  char buffer[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 60000) <= 0) break;
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    transcript.append(buffer, size_t(n));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(fd);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return transcript;
}

TEST(CliFiles, QuantizeOntoItsInputIsRefusedByPathSymlinkAndHardLink) {
  const std::string dir = FreshDir("onto_input");
  const std::string input = dir + "/in.gguf";
  fs::copy_file(testing::StoryF32Gguf(), input);
  const std::string original = ReadBytes(input);
  ASSERT_FALSE(original.empty());
  fs::create_symlink(input, dir + "/symlink.gguf");
  fs::create_hard_link(input, dir + "/hardlink.gguf");
  for (const std::string& output :
       {input, dir + "/./in.gguf", dir + "/symlink.gguf", dir + "/hardlink.gguf"}) {
    SCOPED_TRACE(output);
    const Output result = Petrel({"quantize", input, output, "Q8_0"});
    ExpectOneLineError(result, "is the input");
    EXPECT_NE(result.err.find("output " + output), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(input), std::string::npos) << result.err;
    EXPECT_EQ(ReadBytes(input), original) << "the input must stay byte for byte";
    EXPECT_TRUE(fs::is_symlink(dir + "/symlink.gguf"));
    EXPECT_TRUE(Temporaries(dir).empty());
  }
}

TEST(CliFiles, QuantizeOntoAFileOfItsHuggingFaceFolderIsRefused) {
  const std::string dir = FreshDir("onto_hf");
  const std::string folder = dir + "/story";
  fs::copy(testing::StoryHf(), folder);
  const std::string weights = folder + "/model.safetensors";
  const std::string original = ReadBytes(weights);
  fs::create_hard_link(weights, dir + "/weights-link");
  const Output by_link = Petrel({"quantize", folder, dir + "/weights-link", "Q8_0"});
  ExpectOneLineError(by_link, "is the input " + weights);
  const Output by_path = Petrel({"quantize", folder, folder + "/tokenizer.json", "Q8_0"});
  ExpectOneLineError(by_path, "is the input " + folder + "/tokenizer.json");
  EXPECT_EQ(ReadBytes(weights), original);
  // A new file in the folder is not an input.
  const Output fresh = Petrel({"quantize", folder, folder + "/story-q8_0.gguf", "Q8_0"});
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
}

TEST(CliFiles, SynthAndLogitsOntoTheirInputAreRefused) {
  const std::string dir = FreshDir("synth_logits_input");
  const std::string model = dir + "/model.gguf";
  fs::copy_file(testing::StoryF32Gguf(), model);
  const std::string original = ReadBytes(model);
  ExpectOneLineError(Petrel({"synth", "--shape", "64x2x4x2x96", "--vocab", model, "-o", model}),
                     "is the input");
  ExpectOneLineError(Petrel({"logits", "-m", model, "--ids", "1,2", "-o", model}), "is the input");
  EXPECT_EQ(ReadBytes(model), original);
}

TEST(CliFiles, OutputInAMissingFolderIsAnErrorAndCreatesNothing) {
  const std::string dir = FreshDir("missing_folder");
  const std::string missing = dir + "/missing";
  ExpectOneLineError(Petrel({"quantize", testing::StoryF32Gguf(), missing + "/out.gguf", "Q8_0"}),
                     "the folder " + missing + " does not exist");
  ExpectOneLineError(Petrel({"synth", "--shape", "64x2x4x2x96", "-o", missing + "/out.gguf"}),
                     "does not exist");
  ExpectOneLineError(
      Petrel({"logits", "-m", testing::StoryF32Gguf(), "--ids", "1,2", "-o", missing + "/l.bin"}),
      "does not exist");
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(CliFiles, UnwritableDestinationsAreOneLineErrors) {
  const std::string dir = FreshDir("unwritable");
  // A folder is not a file.
  ExpectOneLineError(Petrel({"synth", "--shape", "64x2x4x2x96", "-o", dir}), "is a folder");
  // A regular file used as a folder.
  std::ofstream(dir + "/plain") << "x";
  ExpectOneLineError(
      Petrel({"logits", "-m", testing::StoryF32Gguf(), "--ids", "1,2", "-o", dir + "/plain/l.bin"}),
      dir + "/plain is not a folder");
  // A device that fails every write.
  ExpectOneLineError(
      Petrel({"logits", "-m", testing::StoryF32Gguf(), "--ids", "1,2", "-o", "/dev/full"}),
      "/dev/full: write failed");
  // Devices and pipes that accept the bytes are written directly.
  const Output to_null =
      Petrel({"logits", "-m", testing::StoryF32Gguf(), "--ids", "1,2", "-o", "/dev/null"});
  EXPECT_EQ(to_null.exit_code, 0) << to_null.err;
  EXPECT_EQ(ReadBytes(dir + "/plain"), "x");
  const std::vector<std::string> synth = {"synth", "--shape", "64x2x4x2x96", "-o"};
  auto synth_to = [&](const std::string& output) {
    std::vector<std::string> args = synth;
    args.push_back(output);
    return Petrel(args);
  };
  ExpectOneLineError(synth_to(""), "output path is empty");
  ExpectOneLineError(synth_to(dir + "/new/"), dir + "/new/: names a folder, not a file");
  // A socket is neither a file to replace nor a device to write to.
  const std::string socket_path = dir + "/socket";
  const int socket_fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size());
  ASSERT_EQ(bind(socket_fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  ExpectOneLineError(synth_to(socket_path), "not a regular file, a character device or a pipe");
  close(socket_fd);
  // A folder that cannot be reached (a loop of links).
  fs::create_symlink("loop", dir + "/loop");
  ExpectOneLineError(synth_to(dir + "/loop/out.gguf"), "cannot reach the folder " + dir + "/loop");
  // A name too long for the temporary beside it.
  ExpectOneLineError(synth_to(dir + "/" + std::string(250, 'n')), "cannot create a file in " + dir);
  EXPECT_TRUE(Temporaries(dir).empty());
  // A character device without a driver (only root may make one).
  const std::string device = dir + "/no-driver";
  if (mknod(device.c_str(), S_IFCHR | 0600, makedev(511, 0)) == 0) {
    ExpectOneLineError(synth_to(device), device + ": cannot open for writing");
  }
}

TEST(CliFiles, AFailedWriteLeavesTheDestinationAsItWas) {
  // A file size limit stands in for a full disk: writes past it fail with EFBIG once SIGXFSZ is
  // ignored (ignored signals stay ignored across exec).
  const std::string dir = FreshDir("write_failure");
  const std::string output = dir + "/out.gguf";
  fs::copy_file(testing::StoryQ8Gguf(), output);
  const std::string original = ReadBytes(output);
  const std::string err_path = dir + "/stderr.txt";
  const std::string command = "trap '' XFSZ; ulimit -f 1200; exec " + testing::Quote(Bin()) +
                              " quantize " + testing::Quote(testing::StoryF32Gguf()) + " " +
                              testing::Quote(output) + " F32 2>" + testing::Quote(err_path);
  std::FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  const int status = pclose(pipe);
  Output result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = ReadBytes(err_path);
  fs::remove(err_path);
  ExpectOneLineError(result,
                     output + ": write failed: File too large (the file was left as it was)");
  EXPECT_EQ(ReadBytes(output), original);
  EXPECT_TRUE(Temporaries(dir).empty());
}

// `quantize` killed with SIGKILL while it writes: the destination is absent or unchanged; the
// killed process cannot remove its temporary, and the next write to that destination does.
void KillQuantizeMidWrite(const std::string& input, const std::string& output, bool existed) {
  const std::string original = existed ? ReadBytes(output) : "";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    freopen("/dev/null", "w", stderr);
    execl(Bin().c_str(), Bin().c_str(), "quantize", input.c_str(), output.c_str(), "Q4_K",
          "--no-progress", static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string folder = fs::path(output).parent_path().string();
  const std::string temporary =
      folder + "/." + fs::path(output).filename().string() + ".petrel-tmp-" + std::to_string(pid);
  // Wait until the temporary holds part of the tensor data (the header alone is small).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::error_code error;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto size = fs::file_size(temporary, error);
    if (!error && size >= 256 * 1024) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status))
      << "quantize finished before it could be killed; use a larger input";
  if (existed) {
    EXPECT_EQ(ReadBytes(output), original) << "the destination must stay byte for byte";
  } else {
    EXPECT_FALSE(fs::exists(output));
  }
  EXPECT_TRUE(fs::exists(temporary)) << "a killed writer leaves its recognizably named temporary";
  // The next write to the same destination clears what the killed one left.
  const Output again = Petrel({"quantize", input, output, "Q8_0"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(Temporaries(folder).empty());
}

TEST(CliFiles, KillNineDuringQuantizeNeverDamagesTheDestination) {
  const std::string dir = FreshDir("kill");
  const std::string input = dir + "/in-f16.gguf";
  const Output synth = Petrel(
      {"synth", "--shape", "512x4x8x8x1408", "--type", "f16", "--n-vocab", "8000", "-o", input});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  {
    SCOPED_TRACE("destination absent");
    KillQuantizeMidWrite(input, dir + "/absent.gguf", /*existed=*/false);
  }
  {
    SCOPED_TRACE("destination present");
    fs::copy_file(testing::StoryQ8Gguf(), dir + "/present.gguf");
    KillQuantizeMidWrite(input, dir + "/present.gguf", /*existed=*/true);
  }
}

TEST(CliFiles, ASymlinkDestinationKeepsTheLinkAndReplacesItsTarget) {
  const std::string dir = FreshDir("symlink_output");
  std::ofstream(dir + "/target.gguf") << "old";
  fs::create_symlink("target.gguf", dir + "/link.gguf");
  const Output result = Petrel({"quantize", testing::StoryF32Gguf(), dir + "/link.gguf", "Q8_0"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(fs::is_symlink(dir + "/link.gguf"));
  EXPECT_EQ(ReadBytes(dir + "/target.gguf").substr(0, 4), "GGUF");
}

TEST(CliFiles, QuantizeProgressOnlyOnATerminal) {
  const std::string dir = FreshDir("progress");
  const std::string output = dir + "/out.gguf";
  // stderr to a file: nothing but the final line.
  const Output piped = Petrel({"quantize", testing::StoryF32Gguf(), output, "Q8_0"});
  EXPECT_EQ(piped.exit_code, 0);
  EXPECT_EQ(piped.err, "wrote " + output + "\n");
  // stderr on a terminal: one line rewritten per tensor, ending with all of them.
  int exit_code = -1;
  const std::string shown =
      RunOnTerminal({Bin(), "quantize", testing::StoryF32Gguf(), output, "Q8_0"}, &exit_code);
  EXPECT_EQ(exit_code, 0) << shown;
  EXPECT_NE(shown.find("\rquantize: 1/"), std::string::npos) << shown;
  const std::regex done(R"(\rquantize: (\d+)/\1 tensors, [0-9.]+/[0-9.]+ MB\r?\n)");
  EXPECT_TRUE(std::regex_search(shown, done)) << shown;
  // --no-progress: none.
  const std::string quiet = RunOnTerminal(
      {Bin(), "quantize", testing::StoryF32Gguf(), output, "Q8_0", "--no-progress"}, &exit_code);
  EXPECT_EQ(exit_code, 0) << quiet;
  EXPECT_EQ(quiet.find("tensors"), std::string::npos) << quiet;
}

// `petrel chat` fed through stdin; returns its stderr.
std::string Chat(const std::string& model, const std::string& chat_template,
                 const std::string& input, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"chat",        "-m", model, "--chat-template-file",
                                   chat_template, "-n", "4",   "--temp",
                                   "0",           "-t", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Output output = Petrel(args, input);
  EXPECT_EQ(output.exit_code, 0) << output.err;
  return output.err;
}

size_t CountErrors(const std::string& err) {
  size_t count = 0;
  for (size_t at = err.find("error: "); at != std::string::npos; at = err.find("error: ", at + 1))
    ++count;
  return count;
}

TEST(CliFiles, ASessionLoadsOnlyIntoTheModelItWasSavedWith) {
  const std::string dir = FreshDir("session");
  const std::string chat_template = ChatTemplate(dir);
  const std::string session = dir + "/chat.session";
  const std::string saved =
      Chat(testing::StoryF32Gguf(), chat_template, "Once upon a time\n/save " + session + "\n");
  ASSERT_NE(saved.find("[saved to " + session + "]"), std::string::npos) << saved;
  EXPECT_TRUE(Temporaries(dir).empty());

  // Another model (same architecture and shape, other weights): one error naming both.
  const std::string other = Chat(testing::StoryQ8Gguf(), chat_template, "/load " + session + "\n");
  EXPECT_EQ(CountErrors(other), 1u) << other;
  EXPECT_NE(other.find("error: " + session + ": saved with the model "), std::string::npos)
      << other;
  EXPECT_NE(other.find("story-f32.gguf, not with the current model "), std::string::npos) << other;
  EXPECT_NE(other.find("story-q8_0.gguf\n"), std::string::npos) << other;
  EXPECT_EQ(other.find("[loaded"), std::string::npos) << other;

  // The same model loads it.
  const std::string same = Chat(testing::StoryF32Gguf(), chat_template, "/load " + session + "\n");
  EXPECT_EQ(CountErrors(same), 0u) << same;
  EXPECT_NE(same.find("[loaded " + session + ": 2 messages]"), std::string::npos) << same;

  // The same model through another path (a copy) has the same fingerprint.
  fs::copy_file(testing::StoryF32Gguf(), dir + "/copy-f32.gguf");
  const std::string copy = Chat(dir + "/copy-f32.gguf", chat_template, "/load " + session + "\n");
  EXPECT_NE(copy.find("[loaded " + session + ": 2 messages]"), std::string::npos) << copy;

  // The same model with another KV cache type.
  const std::string cache = Chat(testing::StoryF32Gguf(), chat_template, "/load " + session + "\n",
                                 {"--cache-type", "f32"});
  EXPECT_NE(cache.find("error: " + session +
                       ": saved with a F16 KV cache, but this one is F32 (--cache-type)"),
            std::string::npos)
      << cache;

  // A model file whose weights changed since the session was saved.
  const std::string copy_session = dir + "/copy.session";
  Chat(dir + "/copy-f32.gguf", chat_template, "Hello\n/save " + copy_session + "\n");
  fs::remove(dir + "/copy-f32.gguf");
  fs::copy_file(testing::StoryQ8Gguf(), dir + "/copy-f32.gguf");
  const std::string changed =
      Chat(dir + "/copy-f32.gguf", chat_template, "/load " + copy_session + "\n");
  EXPECT_NE(changed.find("error: " + copy_session + ": saved with the model "), std::string::npos)
      << changed;
  EXPECT_NE(changed.find("copy-f32.gguf as it was then; that file's weights have changed since"),
            std::string::npos)
      << changed;
}

TEST(CliFiles, SessionSavesAreRefusedOntoTheModelAndIntoMissingFolders) {
  const std::string dir = FreshDir("session_save");
  const std::string chat_template = ChatTemplate(dir);
  const std::string model = dir + "/model.gguf";
  fs::copy_file(testing::StoryF32Gguf(), model);
  const std::string original = ReadBytes(model);
  const std::string onto_model = Chat(model, chat_template, "Hi\n/save " + model + "\n");
  EXPECT_NE(onto_model.find("error: output " + model + " is the input " + model), std::string::npos)
      << onto_model;
  EXPECT_EQ(ReadBytes(model), original);
  const std::string missing = Chat(model, chat_template, "/save " + dir + "/none/s.session\n");
  EXPECT_NE(
      missing.find("error: " + dir + "/none/s.session: the folder " + dir + "/none does not exist"),
      std::string::npos)
      << missing;
  EXPECT_FALSE(fs::exists(dir + "/none"));
}

TEST(CliFiles, SessionFilesOfTheOlderFormatAreRefused) {
  const std::string dir = FreshDir("session_old");
  const std::string chat_template = ChatTemplate(dir);
  // Version 1: magic, version, layers, row bytes, dtype, tokens, metadata bytes, metadata.
  const std::string old_session = dir + "/old.session";
  {
    std::ofstream out(old_session, std::ios::binary);
    const uint32_t fields[4] = {1, 5, 128, 1};
    const uint64_t sizes[2] = {0, 2};
    out.write("PTRLSESS", 8);
    out.write(reinterpret_cast<const char*>(fields), sizeof(fields));
    out.write(reinterpret_cast<const char*>(sizes), sizeof(sizes));
    out.write("{}", 2);
  }
  const std::string err =
      Chat(testing::StoryF32Gguf(), chat_template, "/load " + old_session + "\n");
  EXPECT_EQ(CountErrors(err), 1u) << err;
  EXPECT_NE(err.find("error: " + old_session +
                     ": session format version 1 comes from an older petrel and names no model; "
                     "this one reads "
                     "version 2 (save the session again)"),
            std::string::npos)
      << err;
  // A version from the future.
  {
    std::fstream out(old_session, std::ios::binary | std::ios::in | std::ios::out);
    const uint32_t version = 3;
    out.seekp(8);
    out.write(reinterpret_cast<const char*>(&version), sizeof(version));
  }
  const std::string newer =
      Chat(testing::StoryF32Gguf(), chat_template, "/load " + old_session + "\n");
  EXPECT_NE(newer.find("session format version 3 is newer than this petrel reads (2)"),
            std::string::npos)
      << newer;
  // Version 2 with a model path longer than any path.
  const std::string bad_path = dir + "/bad_path.session";
  {
    std::ofstream out(bad_path, std::ios::binary);
    const uint32_t fields[4] = {2, 5, 128, 1};
    const uint64_t sizes[5] = {0, 0, 0, 0, uint64_t(1) << 40};
    out.write("PTRLSESS", 8);
    out.write(reinterpret_cast<const char*>(fields), sizeof(fields));
    out.write(reinterpret_cast<const char*>(sizes), sizeof(sizes));
  }
  const std::string implausible =
      Chat(testing::StoryF32Gguf(), chat_template, "/load " + bad_path + "\n");
  EXPECT_NE(implausible.find("error: " + bad_path +
                             ": model path of 1099511627776 bytes is not plausible"),
            std::string::npos)
      << implausible;
}

// Removes this run's scratch folders (the kill test's input alone is 42 MB).
class RemoveScratchFolders : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string prefix = "petrel_files_" + std::to_string(getpid()) + "_";
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(testing::ScratchDir(), error)) {
      if (entry.path().filename().string().rfind(prefix, 0) == 0)
        fs::remove_all(entry.path(), error);
    }
  }
};
const auto* const kRemoveScratchFolders =
    ::testing::AddGlobalTestEnvironment(new RemoveScratchFolders);

}  // namespace
}  // namespace petrel
