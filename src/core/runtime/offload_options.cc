// Parsing of the offload flags' values.
#include "core/runtime/offload_options.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace petrel {
namespace {

std::vector<std::string_view> SplitCommas(std::string_view text) {
  std::vector<std::string_view> parts;
  while (true) {
    const size_t comma = text.find(',');
    parts.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return parts;
}

}  // namespace

std::string PetrelDeviceName(std::string_view name) {
  std::string lower;
  for (char c : name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "none") return "cpu";
  if (lower.find(':') != std::string::npos) return lower;
  // "vulkan0" -> "vulkan:0": llama.cpp glues the index to the backend's name.
  size_t digits = lower.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(lower[digits - 1]))) --digits;
  if (digits == 0 || digits == lower.size()) return lower;
  return lower.substr(0, digits) + ":" + lower.substr(digits);
}

Result<std::vector<TensorRule>> ParseTensorRules(std::string_view text) {
  std::vector<TensorRule> rules;
  for (std::string_view part : SplitCommas(text)) {
    TensorRule rule;
    rule.text = std::string(part);
    const size_t equals = part.rfind('=');
    if (equals == std::string_view::npos || equals == 0 || equals + 1 == part.size()) {
      return Error("tensor override '%s': expected PATTERN=DEVICE (e.g. 'ffn_.*_exps=CPU')",
                   rule.text.c_str());
    }
    rule.pattern = std::string(part.substr(0, equals));
    rule.device = PetrelDeviceName(part.substr(equals + 1));
    // std::regex reports a bad pattern only by throwing; nothing else here throws.
    try {
      rule.regex = std::regex(rule.pattern, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& error) {
      return Error("tensor override '%s': '%s' is not a regular expression (%s)", rule.text.c_str(),
                   rule.pattern.c_str(), error.what());
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

Result<std::vector<float>> ParseTensorSplit(std::string_view text) {
  std::vector<float> shares;
  for (std::string_view part : SplitCommas(text)) {
    const std::string entry(part);
    char* end = nullptr;
    const double value = entry.empty() ? 0.0 : std::strtod(entry.c_str(), &end);
    if (entry.empty() || *end != '\0' || !std::isfinite(value)) {
      return Error("--tensor-split '%s': '%s' is not a number", std::string(text).c_str(),
                   entry.c_str());
    }
    if (value <= 0.0) {
      return Error("--tensor-split '%s': every share must be positive, not %s",
                   std::string(text).c_str(), entry.c_str());
    }
    shares.push_back(float(value));
  }
  return shares;
}

std::vector<std::string> SplitDeviceList(std::string_view text) {
  std::vector<std::string> devices;
  for (std::string_view part : SplitCommas(text)) devices.push_back(PetrelDeviceName(part));
  return devices;
}

}  // namespace petrel
