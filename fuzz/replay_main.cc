// The fuzz targets without a fuzzing engine (gcc builds): runs LLVMFuzzerTestOneInput on every
// file of the folders (and files) given, so the seed corpora and the inputs that once crashed
// are replayed by the test suites, under the sanitizers in the malformed suite. A crash or a
// sanitizer report fails the run; finding no input at all fails it too (a corpus gone missing).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::filesystem::path> InputsUnder(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> inputs;
  if (std::filesystem::is_regular_file(root)) {
    inputs.push_back(root);
  } else if (std::filesystem::is_directory(root)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      if (entry.is_regular_file()) inputs.push_back(entry.path());
    }
  }
  std::sort(inputs.begin(), inputs.end());  // the same order on every machine
  return inputs;
}

}  // namespace

int main(int argc, char** argv) {
  size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    for (const auto& path : InputsUnder(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      // Named before it runs, so the last line of a crashed run says which input did it.
      std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "replay: no inputs found under the paths given\n");
    return 1;
  }
  std::fprintf(stderr, "replay: %zu inputs, no crash\n", replayed);
  return 0;
}
