// A compiled GBNF grammar: rules as flat element sequences (characters and rule references),
// repetitions already expanded into right-recursive helper rules, checked at compile time for
// undefined rules and left recursion so that the matcher can expand stacks without looping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/grammar/char_class.h"

namespace petrel {

// What a grammar may cost; each limit that is exceeded is a one-line compile error.
struct GrammarLimits {
  size_t max_source_bytes = 4u << 20;
  size_t max_nesting = 128;       // parenthesised groups inside one another
  size_t max_repetition = 10000;  // m and n of x{m,n}
  size_t max_rules = 100000;      // named rules plus the helpers groups and repetitions make
  size_t max_elements = 2000000;  // characters and references of all rules, after expansion
  size_t max_stacks = 16384;      // parse stacks alive at once while matching (run time)
};

enum class ElementKind : uint8_t {
  kEnd,      // ends an alternative
  kChars,    // one character of a class (value: index into Grammar::classes)
  kRuleRef,  // value: rule index
};

struct GrammarElement {
  ElementKind kind;
  uint32_t value;
};

struct Grammar {
  // Every alternative of every rule, each ended by a kEnd element.
  std::vector<GrammarElement> elements;
  // (n_rules) for each rule, the positions in `elements` where its alternatives start.
  std::vector<std::vector<uint32_t>> rules;
  std::vector<std::string> rule_names;  // (n_rules) named rules, or "name/N" for helpers
  std::vector<CharClass> classes;
  uint32_t root = 0;
  GrammarLimits limits;
};

// Parses and checks GBNF text. Errors name the line and column (`3:14: expected ...`).
Result<std::shared_ptr<const Grammar>> CompileGrammar(std::string_view text,
                                                      const GrammarLimits& limits = {});

}  // namespace petrel
