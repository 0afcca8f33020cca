// The values of the offload flags: `-ot/--override-tensor` rules, `--tensor-split` shares and
// device lists, parsed and checked before anything is loaded.
#pragma once

#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace petrel {

// One `-ot` rule: the tensors whose GGUF name contains a match of `pattern` live on `device`.
struct TensorRule {
  std::string text;     // as given, "blk\.[0-3]\.ffn_.*=CPU", for messages
  std::string pattern;  // ECMAScript regular expression, searched in the name
  std::string device;   // petrel's spelling: "cpu", "vulkan", "vulkan:0"
  std::regex regex;     // `pattern`, compiled
};

// "PATTERN=DEVICE[,PATTERN=DEVICE...]", llama.cpp's syntax. Devices are named as llama.cpp
// lists them (CPU, Vulkan0, CUDA1) or as petrel does (cpu, vulkan, vulkan:0). Fails, naming
// the rule, on a missing '=', an empty pattern or device, or a pattern that is not a regular
// expression.
Result<std::vector<TensorRule>> ParseTensorRules(std::string_view text);

// A device name in petrel's spelling: "CPU" is "cpu", "Vulkan0" is "vulkan:0"; petrel's own
// names are returned as they are.
std::string PetrelDeviceName(std::string_view name);

// "a,b,...": one positive finite share per device (`--tensor-split 3,1`). Fails on an empty
// entry, a zero, a negative or a value that is not a number.
Result<std::vector<float>> ParseTensorSplit(std::string_view text);

// "vulkan:0,vulkan:1" (or one name): the entries of a device list, each in petrel's spelling.
std::vector<std::string> SplitDeviceList(std::string_view text);

}  // namespace petrel
