// Whether a vocabulary can spell anything a grammar accepts, checked once before generating:
// a grammar that needs a character no token contains (a schema's "é" for a vocabulary without
// it or byte tokens) would otherwise fail only once generation reaches that point, after a
// server has begun streaming.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/grammar/grammar.h"

namespace petrel {

// Fails, naming the character class and the rule, when no string the grammar accepts is made
// only of characters that occur in `token_bytes` (each token's bytes). The check is necessary,
// not sufficient: it never refuses a grammar the vocabulary can satisfy. A vocabulary with
// tokens that hold partial UTF-8 characters (byte fallback) can spell every character and
// always passes.
Status CheckGrammarSpelling(const Grammar& grammar, const std::vector<std::string>& token_bytes);

}  // namespace petrel
