// Escapes, suggestions for unknown arguments and -v load details.
#include "tools/cli_ux.h"

#include <algorithm>
#include <cstdio>

#include "core/base/log.h"
#include "core/tokenizer/tokenizer.h"
#include "cpu/kernels.h"  // SimdTargetName

namespace petrel::tools {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string MiB(size_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f MiB", double(bytes) / (1024.0 * 1024.0));
  return buffer;
}

}  // namespace

std::string ProcessEscapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out.push_back(text[i]);
      continue;
    }
    const char c = text[i + 1];
    char replacement = 0;
    bool known = true;
    switch (c) {
      case 'n': replacement = '\n'; break;
      case 'r': replacement = '\r'; break;
      case 't': replacement = '\t'; break;
      case 'a': replacement = '\a'; break;
      case 'b': replacement = '\b'; break;
      case 'f': replacement = '\f'; break;
      case 'v': replacement = '\v'; break;
      case '0': replacement = '\0'; break;
      case '\\': replacement = '\\'; break;
      case '"': replacement = '"'; break;
      case '\'': replacement = '\''; break;
      case '?': replacement = '?'; break;
      case 'x': {
        // \xH or \xHH; a \x without hex digits stays as written.
        int value = -1;
        size_t used = 0;
        for (size_t k = i + 2; k < text.size() && used < 2 && HexValue(text[k]) >= 0; ++k, ++used) {
          value = (value < 0 ? 0 : value * 16) + HexValue(text[k]);
        }
        if (value < 0) {
          known = false;
          break;
        }
        out.push_back(char(value));
        i += 1 + used;
        continue;
      }
      default: known = false; break;
    }
    if (!known) {
      out.push_back('\\');
      continue;
    }
    out.push_back(replacement);
    ++i;
  }
  return out;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  const size_t allowed = std::max<size_t>(2, std::max(name.size(), best.size()) / 3);
  if (best_distance <= allowed) return best;
  // A longer or shorter spelling of a name ("--temperature" for "--temp").
  const std::string_view bare = name.substr(std::min(name.find_first_not_of('-'), name.size()));
  for (const std::string& candidate : candidates) {
    const std::string_view other =
        std::string_view(candidate).substr(std::min(candidate.find_first_not_of('-'), candidate.size()));
    const size_t shorter = std::min(bare.size(), other.size());
    if (shorter >= 3 && bare.substr(0, shorter) == other.substr(0, shorter)) return candidate;
  }
  return std::string();
}

std::string UnknownArgumentMessage(const CLI::App& app) {
  const std::vector<std::string> extras = app.remaining();
  // The first option-like one: a value after an unknown option is extra only because of it.
  std::string arg = extras.empty() ? std::string() : extras[0];
  for (const std::string& extra : extras) {
    if (extra.size() > 1 && extra[0] == '-') {
      arg = extra;
      break;
    }
  }
  const std::string where = app.get_parent() ? "petrel " + app.get_name() : "petrel";
  if (arg.size() > 1 && arg[0] == '-' && arg != "--") {
    const std::string name = arg.substr(0, arg.find('='));
    std::vector<std::string> names;
    for (const CLI::Option* option : app.get_options()) {
      for (const std::string& lname : option->get_lnames()) names.push_back("--" + lname);
      for (const std::string& sname : option->get_snames()) names.push_back("-" + sname);
    }
    const std::string closest = ClosestName(name, names);
    if (!closest.empty()) {
      return "unknown option '" + name + "' for '" + where + "'; did you mean " + closest + "?";
    }
    return "unknown option '" + name + "' for '" + where + "' (see " + where + " --help)";
  }
  if (!app.get_parent()) {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    const std::string closest = ClosestName(arg, names);
    if (!closest.empty()) return "unknown subcommand '" + arg + "'; did you mean " + closest + "?";
    return "unknown subcommand '" + arg + "' (see petrel help)";
  }
  return "unexpected argument '" + arg + "' for '" + where + "' (see " + where + " --help)";
}

void LogLoadDetails(const Engine& engine, double load_seconds) {
  const LoadedModel& model = engine.model();
  const ModelConfig& config = model.config;
  const EngineOptions& options = engine.options();
  PETREL_LOG_INFO("load: %s (%s), architecture %s, %zu tensors, %s of weights (%s mapped)",
                  model.source.c_str(), model.format.c_str(), config.architecture.c_str(),
                  model.n_tensors, MiB(model.weight_bytes).c_str(), MiB(model.mapped_bytes).c_str());
  const size_t kv_bytes = (engine.kv_has_values() ? 2 : 1) * engine.kv_layers() * engine.kv_row_bytes() * engine.context() *
                          std::max<size_t>(1, options.max_sequences);
  PETREL_LOG_INFO("load: context %zu tokens x %zu sequences, KV cache %s (%s)", engine.context(),
                  std::max<size_t>(1, options.max_sequences), DTypeName(engine.kv_type()),
                  MiB(kv_bytes).c_str());
  PETREL_LOG_INFO("load: placement %s", engine.PlacementString().c_str());
  PETREL_LOG_INFO("load: SIMD target %s, %zu threads, batch %zu tokens, micro-batch %zu tokens",
                  cpu::SimdTargetName().c_str(), options.n_threads, options.max_batch_tokens,
                  options.ubatch_tokens);
  if (const Tokenizer* tokenizer = engine.tokenizer()) {
    PETREL_LOG_INFO("load: tokenizer %zu tokens, BOS %d, EOS %d", tokenizer->n_vocab(),
                    tokenizer->bos_id(), tokenizer->eos_id());
  }
  PETREL_LOG_INFO("load: %.3f s", load_seconds);
}

}  // namespace petrel::tools
