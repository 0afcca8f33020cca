// Registration and parsing of the sampling flags.
#include "tools/sampling_options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "core/generation/sampling/sampling_fields.h"
#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"
#include "tools/common.h"

namespace petrel::tools {
namespace {

// llama.cpp's escapes in --dry-sequence-breaker, so that a newline can be given on a command line.
std::string UnescapeBreaker(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char next = text[++i];
    out += next == 'n' ? '\n' : next == 't' ? '\t' : next == 'r' ? '\r' : next;
  }
  return out;
}

}  // namespace

void SamplingOptions::AddTo(CLI::App& app) {
  SamplingParams& s = generate.sampling;
  auto add = [&](const char* name, auto& value, const char* help, CLI::Validator check) {
    flags.push_back(app.add_option(name, value, help)->check(check));
  };
  add("-n,--n-predict", n_predict,
      "tokens to generate (default 64; -1: until end of generation or a full context)",
      IntRange(-1, kMaxTokens));
  add("--min-tokens", generate.min_new_tokens, "generate at least this many tokens (default 0; at most -n)",
      IntRange(0, kMaxTokens));
  flags.push_back(app.add_flag("--ignore-eos", generate.ignore_eos, "never stop at end-of-generation tokens"));
  flags.push_back(app.add_option("--stop", generate.stop, "stop string (repeatable); not included in the output"));
  // The sampler stages' numbers: one table for these flags and the server's request fields.
  for (const SamplingField& field : SamplingFields()) {
    std::string help = field.help;
    if (field.needs) {
      help += std::string("; without ") + FindSamplingField(field.needs)->flag + ": a warning";
    }
    CLI::Validator check = !field.choices.empty()
                               ? IntChoice({field.choices.begin(), field.choices.end()})
                           : field.integer ? IntRange(int64_t(field.lo), int64_t(field.hi))
                                           : RealRange(field.lo, field.hi, field.lo_open);
    if (field.real) {
      add(field.flag, s.*field.real, help.c_str(), check);
    } else {
      add(field.flag, s.*field.integer, help.c_str(), check);
    }
  }
  flags.push_back(app.add_option(
      "--dry-sequence-breaker", dry_sequence_breakers,
      "DRY sequence breaker (repeatable; replaces the default \\n : \" *; \"none\": no breakers; "
      "\\n \\t \\\\ \\\" are escapes)"));
  flags.push_back(app.add_option("--samplers", samplers, "stage order, e.g. penalties;top_k;top_p;temperature"));
  flags.push_back(app.add_option("-l,--logit-bias", logit_bias, "TOKEN+BIAS or TOKEN-BIAS (repeatable; -inf bans)"));
  flags.push_back(app.add_option("--grammar", grammar, "GBNF grammar the output must match"));
  flags.push_back(app.add_option("--grammar-file", grammar_file, "file with a GBNF grammar"));
  flags.push_back(
      app.add_option("--json-schema", json_schema, "JSON Schema the output must validate against"));
  flags.push_back(
      app.add_option("--json-schema-file", json_schema_file, "file with a JSON Schema"));
  add("--seed", s.seed, "random seed (default: a fresh one per run, shown by -v and --json)", IntRange(0, INT64_MAX));
  add("--n-probs", s.n_probs, "report the N most likely tokens at each step (default 0; needs --json)",
      IntRange(0, 100));
}

std::string SamplingOptions::GivenExcept(std::initializer_list<const char*> allowed) const {
  for (const CLI::Option* option : flags) {
    if (option->count() == 0) continue;
    const std::string name = option->get_name();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) return name;
  }
  return "";
}

bool SamplingOptions::Given(const char* name) const {
  for (const CLI::Option* option : flags) {
    if (option->get_name() == name) return option->count() > 0;
  }
  return false;
}

Status SamplingOptions::Check() const {
  if (n_predict >= 0 && generate.min_new_tokens > size_t(n_predict)) {
    return Error("--min-tokens %zu is more than -n %lld", generate.min_new_tokens, (long long)n_predict);
  }
  auto given = [&](const char* name) { return Given(name); };
  for (const SamplingField& field : SamplingFields()) {
    if (given(field.flag) && !SamplingStageOn(field, generate.sampling)) {
      Warn("%s has no effect without %s (ignored)", field.flag, FindSamplingField(field.needs)->flag);
    }
  }
  return Status::Ok();
}

Result<GenerateOptions> SamplingOptions::ToGenerateOptions() const {
  GenerateOptions options = generate;
  options.max_new_tokens = n_predict < 0 ? SIZE_MAX : size_t(n_predict);
  // As llama.cpp: a fresh seed per run unless --seed fixes one (runs report the one drawn).
  if (!Given("--seed")) {
    std::random_device entropy;
    options.sampling.seed = ((uint64_t(entropy()) << 32) | entropy()) & uint64_t(INT64_MAX);
  }
  if (!samplers.empty()) {
    auto order = ParseSamplerOrder(samplers);
    if (!order.ok()) return order.status().Wrap("--samplers");
    options.sampling.order = *order;
  }
  for (const std::string& item : logit_bias) {
    const size_t sign = item.find_first_of("+-", 1);
    char* end = nullptr;
    const long long token = std::strtoll(item.substr(0, sign).c_str(), &end, 10);
    if (sign == std::string::npos || *end != '\0' || token < 0) {
      return Error("--logit-bias '%s': expected TOKEN+BIAS or TOKEN-BIAS", item.c_str());
    }
    const std::string value = item.substr(sign);
    float bias;
    if (value == "-inf") {
      bias = -INFINITY;
    } else {
      bias = std::strtof(value.c_str(), &end);
      if (*end != '\0' || !std::isfinite(bias)) return Error("--logit-bias '%s': bad bias", item.c_str());
    }
    options.sampling.logit_bias[int32_t(token)] = bias;
  }
  if (!dry_sequence_breakers.empty()) {
    options.sampling.dry_sequence_breakers.clear();
    if (dry_sequence_breakers != std::vector<std::string>{"none"}) {
      for (const std::string& breaker : dry_sequence_breakers) {
        options.sampling.dry_sequence_breakers.push_back(UnescapeBreaker(breaker));
      }
    }
    if (Status status = CheckSamplingParams(options.sampling); !status.ok()) {
      return status.Wrap("--dry-sequence-breaker");
    }
  }
  PETREL_ASSIGN_OR_RETURN(options.sampling.grammar, GrammarText());
  return options;
}

Result<std::string> SamplingOptions::GrammarText() const {
  const std::pair<const char*, const std::string*> sources[] = {
      {"--grammar", &grammar},
      {"--grammar-file", &grammar_file},
      {"--json-schema", &json_schema},
      {"--json-schema-file", &json_schema_file}};
  const char* flag = nullptr;
  std::string text;
  for (const auto& [name, value] : sources) {
    if (value->empty()) continue;
    if (flag) return Error("%s and %s both constrain the output; give one", flag, name);
    flag = name;
  }
  if (!flag) return std::string();
  const std::string_view name = flag;
  if (name == "--grammar-file" || name == "--json-schema-file") {
    const std::string& path = name == "--grammar-file" ? grammar_file : json_schema_file;
    std::ifstream file(path, std::ios::binary);
    if (!file) return Error("%s %s: cannot open the file", flag, path.c_str());
    std::ostringstream content;
    content << file.rdbuf();
    if (file.bad()) return Error("%s %s: cannot read the file", flag, path.c_str());
    text = content.str();
  } else {
    text = name == "--grammar" ? grammar : json_schema;
  }
  if (name == "--json-schema" || name == "--json-schema-file") {
    auto converted = JsonSchemaToGbnf(text);
    if (!converted.ok()) return converted.status().Wrap(flag);
    text = std::move(converted).value();
  }
  auto compiled = CompileGrammar(text);
  if (!compiled.ok()) return compiled.status().Wrap(std::string(flag) + ": grammar");
  return text;
}

}  // namespace petrel::tools
