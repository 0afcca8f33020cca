// The rules as the GBNF parser builds them (internal): alternatives as element vectors, rule
// names, where each rule was first named. CompileGrammar checks and flattens them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/grammar/grammar.h"

namespace petrel::grammar_internal {

struct RuleDraft {
  std::string name;
  std::vector<std::vector<GrammarElement>> alternatives;
  bool defined = false;
  size_t first_seen = 0;  // byte offset of its definition or first reference
};

struct GrammarDraft {
  std::vector<RuleDraft> rules;
  std::unordered_map<std::string, uint32_t> ids;  // named rules only
  std::vector<CharClass> classes;
  size_t n_elements = 0;
};

// "line:col" (1-based, columns in characters) of byte offset `pos` of `text`.
std::string TextPosition(std::string_view text, size_t pos);

// Parses GBNF text into `draft`, expanding repetitions into helper rules.
Status ParseGbnf(std::string_view text, const GrammarLimits& limits, GrammarDraft* draft);

}  // namespace petrel::grammar_internal
