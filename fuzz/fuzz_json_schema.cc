// Fuzz target: a JSON Schema (response_format / json_schema of a request) converted to GBNF.
// What the converter returns must compile: a schema it accepts but whose grammar does not
// compile is a converter bug, and aborts here so the fuzzer keeps it. A grammar that only
// breaks a size limit is the limit doing its work, not a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"

namespace {

// The compile errors that are size limits (GrammarLimits), by their wording.
bool IsLimit(const std::string& message) {
  for (const char* words : {"limit", "more than", "nested deeper than"}) {
    if (message.find(words) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petrel;
  std::string_view schema(reinterpret_cast<const char*>(data), size);
  auto gbnf = JsonSchemaToGbnf(schema);
  if (!gbnf.ok()) return 0;
  auto grammar = CompileGrammar(*gbnf);
  if (!grammar.ok() && !IsLimit(grammar.status().message())) {
    std::fprintf(stderr, "schema accepted, but its grammar does not compile: %s\n%s\n",
                 grammar.status().message().c_str(), gbnf->c_str());
    std::abort();
  }
  return 0;
}
