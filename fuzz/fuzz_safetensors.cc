// Fuzz target: a .safetensors file (header length, JSON header, dtypes, shapes, data offsets),
// then a read of every tensor's first and last byte, which the reader promises lie in the file.
#include <cstddef>
#include <cstdint>

#include "core/format/safetensors.h"
#include "input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  fuzz::InputFile input(data, size);
  if (!input.ok()) return 0;
  auto file = SafetensorsFile::Open(input.path());
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const SafetensorsTensor& tensor : (*file)->tensors()) {
    (void)(*file)->Find(tensor.name);
    if (tensor.bytes == 0) continue;
    const auto* bytes = static_cast<const uint8_t*>(tensor.data);
    sink = sink + bytes[0] + bytes[tensor.bytes - 1];
  }
  return 0;
}
