// CheckGrammarSpelling: the characters the vocabulary holds, then a fixpoint over the rules.
#include "core/grammar/grammar_spelling.h"

#include <cstdint>
#include <cstdio>
#include <set>

namespace petrel {
namespace {

// The code points of `bytes`; false when they are not whole, valid UTF-8 characters.
bool AppendCodePoints(const std::string& bytes, std::set<uint32_t>* out) {
  std::vector<uint32_t> found;
  for (size_t i = 0; i < bytes.size();) {
    const auto lead = uint8_t(bytes[i]);
    const size_t extra = lead < 0x80 ? 0 : (lead & 0xE0) == 0xC0 ? 1 : (lead & 0xF0) == 0xE0 ? 2
                                       : (lead & 0xF8) == 0xF0   ? 3
                                                                 : 4;
    if (extra == 4 || i + extra >= bytes.size()) return false;
    uint32_t cpt = extra == 0 ? lead : lead & (0x3F >> extra);
    for (size_t k = 1; k <= extra; ++k) {
      const auto next = uint8_t(bytes[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      cpt = (cpt << 6) | (next & 0x3F);
    }
    found.push_back(cpt);
    i += 1 + extra;
  }
  out->insert(found.begin(), found.end());
  return true;
}

std::string Describe(uint32_t cpt) {
  char text[48];
  if (cpt >= 0x20 && cpt < 0x7F) {
    std::snprintf(text, sizeof(text), "'%c' (U+%04X)", char(cpt), unsigned(cpt));
  } else {
    std::snprintf(text, sizeof(text), "U+%04X", unsigned(cpt));
  }
  return text;
}

}  // namespace

Status CheckGrammarSpelling(const Grammar& grammar, const std::vector<std::string>& token_bytes) {
  std::set<uint32_t> spelled;
  for (const std::string& bytes : token_bytes) {
    if (!AppendCodePoints(bytes, &spelled)) return Status::Ok();  // byte tokens spell anything
  }
  std::vector<bool> class_ok(grammar.classes.size(), false);
  for (size_t c = 0; c < grammar.classes.size(); ++c) {
    for (const uint32_t cpt : spelled) {
      if (grammar.classes[c].Matches(cpt)) {
        class_ok[c] = true;
        break;
      }
    }
  }
  // Productive rules: some alternative whose every element is a spellable class or a
  // productive rule. Grows to a fixpoint (at most one pass per rule).
  const size_t n_rules = grammar.rules.size();
  std::vector<bool> productive(n_rules, false);
  auto alternative_ok = [&](uint32_t pos) {
    for (;; ++pos) {
      const GrammarElement& e = grammar.elements[pos];
      if (e.kind == ElementKind::kEnd) return true;
      if (e.kind == ElementKind::kChars && !class_ok[e.value]) return false;
      if (e.kind == ElementKind::kRuleRef && !productive[e.value]) return false;
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      if (productive[r]) continue;
      for (const uint32_t start : grammar.rules[r]) {
        if (alternative_ok(start)) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  if (productive[grammar.root]) return Status::Ok();
  // Name an unspellable class the root depends on: the first found from the root along
  // unproductive rules.
  std::vector<bool> seen(n_rules, false);
  std::vector<uint32_t> pending = {grammar.root};
  seen[grammar.root] = true;
  while (!pending.empty()) {
    const uint32_t r = pending.back();
    pending.pop_back();
    for (uint32_t pos : grammar.rules[r]) {
      for (;; ++pos) {
        const GrammarElement& e = grammar.elements[pos];
        if (e.kind == ElementKind::kEnd) break;
        if (e.kind == ElementKind::kChars && !class_ok[e.value]) {
          const auto& ranges = grammar.classes[e.value].ranges();
          const std::string what =
              ranges.size() == 1 && ranges[0].first == ranges[0].second && !grammar.classes[e.value].negated()
                  ? "the character " + Describe(ranges[0].first)
                  : std::string("a character class");
          return Error("grammar: rule '%s' needs %s, which no token of the model's vocabulary "
                       "spells",
                       grammar.rule_names[r].c_str(), what.c_str());
        }
        if (e.kind == ElementKind::kRuleRef && !productive[e.value] && !seen[e.value]) {
          seen[e.value] = true;
          pending.push_back(e.value);
        }
      }
    }
  }
  return Error("grammar: the model's vocabulary cannot spell any text the grammar accepts");
}

}  // namespace petrel
