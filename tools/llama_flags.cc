// The llama.cpp flag table and the rewrite before parsing.
#include "tools/llama_flags.h"

#include <cctype>
#include <string_view>

namespace petrel::tools {
namespace {

// Values a switch-like llama.cpp flag may carry (-fa on, -fa auto, --mmap false, ...).
bool IsSwitchValue(std::string_view text) {
  for (const char* value : {"on", "off", "auto", "1", "0", "true", "false", "enabled", "disabled"}) {
    if (text == value) return true;
  }
  return false;
}

// A word that would reach CLI11 as one short option plus a glued value although the user meant
// a multi-letter flag: a single dash followed by at least two letters only ("-ngl", "-xyz").
// Values glued to a one-letter flag keep working when they hold anything but letters
// ("-n64", "-c2048", "-t4").
bool LooksLikeLongShortFlag(std::string_view word) {
  if (word.size() < 3 || word[0] != '-' || word[1] == '-') return false;
  for (const char c : word.substr(1, word.find('=') == std::string_view::npos ? word.npos : word.find('=') - 1)) {
    if (!std::isalpha(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

// llama.cpp's device names (`--list-devices`: Vulkan0, CUDA1, none) as petrel's.
std::string DeviceName(const std::string& value) {
  if (value == "none") return "cpu";
  for (const char* backend : {"Vulkan", "CUDA"}) {
    const std::string_view prefix = backend;
    if (value.size() > prefix.size() && value.compare(0, prefix.size(), prefix) == 0 &&
        value.find_first_not_of("0123456789", prefix.size()) == std::string::npos) {
      std::string name(prefix);
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      return name + ":" + value.substr(prefix.size());
    }
  }
  return value;
}

const LlamaFlag* Find(std::string_view word) {
  for (const LlamaFlag& flag : LlamaFlags()) {
    std::string_view names = flag.names;
    while (!names.empty()) {
      const size_t comma = names.find(',');
      if (names.substr(0, comma) == word) return &flag;
      names = comma == names.npos ? std::string_view() : names.substr(comma + 1);
    }
  }
  return nullptr;
}

}  // namespace

const std::vector<LlamaFlag>& LlamaFlags() {
  using V = LlamaFlag::Value;
  static const std::vector<LlamaFlag> kFlags = {
      // Same meaning, another spelling.
      {"-ngl", "--gpu-layers", V::kRequired, nullptr},
      {"-dev,--device", "--device", V::kRequired, nullptr},
      {"-ot,--override-tensor", "--override-tensor", V::kRequired, nullptr},
      {"-ts,--tensor-split", "--tensor-split", V::kRequired, nullptr},
      {"-cmoe,--cpu-moe", "--cpu-moe", V::kNone, nullptr},
      {"-ncmoe,--n-cpu-moe", "--n-cpu-moe", V::kRequired, nullptr},
      {"-ctk,--cache-type-k", "--cache-type", V::kRequired, nullptr},
      {"-ctv,--cache-type-v", "--cache-type", V::kRequired, nullptr},
      {"-np", "--parallel", V::kRequired, nullptr},
      {"-ub", "--ubatch-size", V::kRequired, nullptr},
      {"-s", "--seed", V::kRequired, nullptr},
      {"-sys,--system-prompt", "--system", V::kRequired, nullptr},
      {"-sp", "--special", V::kNone, nullptr},
      {"--predict", "--n-predict", V::kRequired, nullptr},
      {"-co", "--color", V::kNone, nullptr},
      {"--typical-p", "--typical", V::kRequired, nullptr},
      {"--top-nsigma", "--top-n-sigma", V::kRequired, nullptr},
      {"--draft-model,-md", "--draft", V::kRequired, nullptr},
      {"-devd,--device-draft", "--draft-device", V::kRequired, nullptr},
      {"-ngld,--gpu-layers-draft,--n-gpu-layers-draft", "--draft-gpu-layers", V::kRequired,
       nullptr},
      {"--draft-n", "--draft-max", V::kRequired, nullptr},
      {"--draft-p-min", "--draft-min-p", V::kRequired, nullptr},
      // What petrel always does: nothing to switch on.
      {"--jinja", "", V::kNone, nullptr},
      {"-no-cnv,--no-conversation", "", V::kNone, nullptr},
      {"--mmap", "", V::kNone, nullptr},
      {"--cont-batching,-cb", "", V::kNone, nullptr},
      // Not petrel features: dropped, with the warning saying why that is harmless or what to
      // use instead.
      {"-fa,--flash-attn", nullptr, V::kOptionalSwitch,
       "petrel's attention is always the fused streaming kind"},
      {"-sm,--split-mode", nullptr, V::kRequired,
       "petrel splits a model over devices by layer ranges (--tensor-split)"},
      {"-mg,--main-gpu", nullptr, V::kRequired, "choose the device with --device vulkan:N"},
      {"-nkvo,--no-kv-offload", nullptr, V::kNone,
       "each layer's KV cache lives with the layer on its device"},
      {"-tb,--threads-batch", nullptr, V::kRequired, "-t sets the threads of every pass"},
      {"-cnv,--conversation,-i,--interactive,-if,--interactive-first", nullptr, V::kNone,
       "for a conversation use `petrel chat`"},
      {"--no-warmup", nullptr, V::kNone, "petrel does no warm-up pass"},
      {"--log-disable", nullptr, V::kNone, "petrel logs only warnings and errors unless -v"},
      {"-fit,--fit", nullptr, V::kOptionalSwitch, "use --gpu-layers auto"},
      {"--no-perf", nullptr, V::kNone, "the stats line goes to stderr"},
      {"-cram,--cache-ram", nullptr, V::kRequired, "the prompt cache lives in the KV blocks"},
      {"--metrics", nullptr, V::kNone, "petrel serve always answers /metrics"},
      {"-kvu,--kv-unified", nullptr, V::kNone, "petrel's paged KV cache is always shared"},
  };
  return kFlags;
}

Result<std::vector<std::string>> TranslateLlamaFlags(const std::vector<std::string>& args,
                                                     std::vector<std::string>* warnings) {
  std::vector<std::string> out;
  out.reserve(args.size());
  std::string cache_type;  // the one value -ctk / -ctv gave
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") {  // everything after it is positional
      out.insert(out.end(), args.begin() + i, args.end());
      break;
    }
    // --flag=value: the flag part is looked up, the value kept.
    const size_t equals = word.rfind("--", 0) == 0 ? word.find('=') : std::string::npos;
    const std::string name = word.substr(0, equals);
    const LlamaFlag* flag = Find(name);
    if (!flag) {
      if (LooksLikeLongShortFlag(word)) {
        return Error("unknown option '%s': petrel's short options are one letter (did you mean -%s?)",
                     word.c_str(), word.c_str());
      }
      out.push_back(word);
      continue;
    }
    const bool glued = equals != std::string::npos;
    if (flag->petrel && *flag->petrel) {
      const std::string target = flag->petrel;
      if (flag->value != LlamaFlag::kRequired) {
        out.push_back(target);
        continue;
      }
      if (!glued && i + 1 == args.size()) {  // CLI11 names the missing value
        out.push_back(target);
        continue;
      }
      std::string value = glued ? word.substr(equals + 1) : args[++i];
      if (target == "--device" || target == "--draft-device") {
        // "Vulkan0,Vulkan1": each entry of a device list.
        std::string names;
        size_t start = 0;
        while (true) {
          const size_t comma = value.find(',', start);
          if (start) names += ',';
          names += DeviceName(value.substr(start, comma - start));
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
        value = names;
      }
      if (target == "--cache-type") {
        // petrel keeps K and V in one type: -ctk and -ctv may both come, with one value.
        if (!cache_type.empty()) {
          if (value != cache_type) {
            return Error("%s %s: petrel stores K and V in one type, and %s was already given "
                         "(use --cache-type for both)",
                         name.c_str(), value.c_str(), cache_type.c_str());
          }
          continue;
        }
        cache_type = value;
      }
      out.push_back(target);
      out.push_back(value);
      continue;
    }
    // Dropped: the flag and the value it carries.
    if (!glued) {
      if (flag->value == LlamaFlag::kRequired && i + 1 < args.size()) {
        ++i;
      } else if (flag->value == LlamaFlag::kOptionalSwitch && i + 1 < args.size() &&
                 IsSwitchValue(args[i + 1])) {
        ++i;
      }
    }
    if (!flag->petrel) {
      warnings->push_back(name + " is a llama.cpp option petrel does not have: " + flag->note +
                          "; ignored");
    }
  }
  return out;
}

}  // namespace petrel::tools
