// A GBNF grammar as a constraint on sampling: the matcher compiled against a tokenizer's
// vocabulary, and the sampler stage that masks the tokens it forbids and advances it.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "core/base/status.h"
#include "core/generation/sampling/sampler.h"  // SamplerStage
#include "core/grammar/grammar_matcher.h"

namespace petrel {

class Tokenizer;

// Compiles `grammar` and builds the trie of the first `n_vocab` tokens' bytes (the model's
// logit count; tokens past the tokenizer's vocabulary have no text). Errors begin "grammar: ".
Result<std::shared_ptr<GrammarMatcher>> CompileGrammarConstraint(std::string_view grammar,
                                                                 const Tokenizer& tokenizer,
                                                                 size_t n_vocab);

// The stage SamplerChain::SetConstraint takes: removes every candidate the grammar forbids
// now, and advances the grammar with each accepted token. A failure (see
// GrammarMatcher::error()) leaves the candidates as they are; the caller checks it.
std::unique_ptr<SamplerStage> MakeGrammarStage(std::shared_ptr<GrammarMatcher> matcher);

}  // namespace petrel
