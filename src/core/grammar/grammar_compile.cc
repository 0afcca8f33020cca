// CompileGrammar: parse, then the checks that keep matching finite (every referenced rule
// defined, no left recursion, also through rules that can match nothing), then flattening.
#include <algorithm>

#include "core/grammar/grammar_draft.h"

namespace petrel {
namespace {

using grammar_internal::GrammarDraft;
using grammar_internal::RuleDraft;

// Rules that can match the empty string, by a worklist over "elements not yet known to be
// nullable" counters, linear in the grammar's size whatever the rules' order.
std::vector<bool> NullableRules(const GrammarDraft& draft) {
  const size_t n_rules = draft.rules.size();
  std::vector<bool> nullable(n_rules, false);
  struct AltRef {
    uint32_t rule;
    uint32_t alt;
  };
  std::vector<std::vector<AltRef>> used_in(n_rules);    // rule -> alternatives naming it
  std::vector<std::vector<uint32_t>> pending(n_rules);  // per rule and alternative
  std::vector<uint32_t> queue;
  for (uint32_t r = 0; r < n_rules; ++r) {
    const auto& alternatives = draft.rules[r].alternatives;
    pending[r].assign(alternatives.size(), 0);
    for (uint32_t a = 0; a < alternatives.size(); ++a) {
      bool has_chars = false;
      for (const GrammarElement& e : alternatives[a]) has_chars |= e.kind == ElementKind::kChars;
      if (has_chars) {
        pending[r][a] = UINT32_MAX;  // never nullable
        continue;
      }
      for (const GrammarElement& e : alternatives[a]) {
        used_in[e.value].push_back({r, a});
        ++pending[r][a];
      }
      if (pending[r][a] == 0 && !nullable[r]) {
        nullable[r] = true;
        queue.push_back(r);
      }
    }
  }
  while (!queue.empty()) {
    const uint32_t s = queue.back();
    queue.pop_back();
    for (const AltRef& ref : used_in[s]) {
      if (--pending[ref.rule][ref.alt] == 0 && !nullable[ref.rule]) {
        nullable[ref.rule] = true;
        queue.push_back(ref.rule);
      }
    }
  }
  return nullable;
}

// A rule that can derive itself before any character (directly, or after rules that can match
// nothing) would make the matcher expand forever. Finds such a cycle by an iterative
// depth-first search, so a long chain of rules cannot overflow the stack.
Status CheckLeftRecursion(const GrammarDraft& draft, const std::vector<bool>& nullable) {
  const size_t n_rules = draft.rules.size();
  std::vector<std::vector<uint32_t>> left(n_rules);  // rules that can come first in a rule
  for (uint32_t r = 0; r < n_rules; ++r) {
    for (const auto& alternative : draft.rules[r].alternatives) {
      for (const GrammarElement& e : alternative) {
        if (e.kind != ElementKind::kRuleRef) break;
        left[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
  }
  enum : uint8_t { kNew, kOnPath, kDone };
  std::vector<uint8_t> state(n_rules, kNew);
  struct Frame {
    uint32_t rule;
    size_t next;
  };
  std::vector<Frame> path;
  for (uint32_t start = 0; start < n_rules; ++start) {
    if (state[start] != kNew) continue;
    path.push_back({start, 0});
    state[start] = kOnPath;
    while (!path.empty()) {
      Frame& frame = path.back();
      if (frame.next == left[frame.rule].size()) {
        state[frame.rule] = kDone;
        path.pop_back();
        continue;
      }
      const uint32_t next = left[frame.rule][frame.next++];
      if (state[next] == kOnPath) {
        // Helpers are named "rule/N" after the rule their group or repetition is in.
        const std::string& name = draft.rules[next].name;
        const size_t slash = name.find('/');
        if (slash != std::string::npos) {
          return Error("left recursion: a group or repetition in rule '%s' can begin with itself",
                       name.substr(0, slash).c_str());
        }
        return Error("left recursion: rule '%s' can begin with itself", name.c_str());
      }
      if (state[next] == kNew) {
        state[next] = kOnPath;
        path.push_back({next, 0});
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<const Grammar>> CompileGrammar(std::string_view text,
                                                      const GrammarLimits& limits) {
  GrammarDraft draft;
  PETREL_RETURN_IF_ERROR(grammar_internal::ParseGbnf(text, limits, &draft));
  for (const RuleDraft& rule : draft.rules) {
    if (!rule.defined) {
      return ErrorMessage(grammar_internal::TextPosition(text, rule.first_seen) +
                          ": undefined rule '" + rule.name + "'");
    }
  }
  auto root = draft.ids.find("root");
  if (root == draft.ids.end()) return Error("the grammar has no 'root' rule");
  PETREL_RETURN_IF_ERROR(CheckLeftRecursion(draft, NullableRules(draft)));

  auto grammar = std::make_shared<Grammar>();
  grammar->limits = limits;
  grammar->root = root->second;
  grammar->classes = std::move(draft.classes);
  grammar->elements.reserve(draft.n_elements);
  grammar->rules.resize(draft.rules.size());
  grammar->rule_names.reserve(draft.rules.size());
  for (size_t r = 0; r < draft.rules.size(); ++r) {
    RuleDraft& rule = draft.rules[r];
    grammar->rule_names.push_back(std::move(rule.name));
    for (const auto& alternative : rule.alternatives) {
      grammar->rules[r].push_back(uint32_t(grammar->elements.size()));
      grammar->elements.insert(grammar->elements.end(), alternative.begin(), alternative.end());
      grammar->elements.push_back({ElementKind::kEnd, 0});
    }
    if (rule.alternatives.empty()) {
      grammar->rules[r].push_back(uint32_t(grammar->elements.size()));
      grammar->elements.push_back({ElementKind::kEnd, 0});
    }
  }
  return std::shared_ptr<const Grammar>(std::move(grammar));
}

}  // namespace petrel
