// The grammar constraint: vocabulary bytes from the tokenizer, and the masking stage.
#include "core/generation/grammar_constraint.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/grammar/grammar.h"
#include "core/grammar/grammar_spelling.h"
#include "core/grammar/vocab_trie.h"
#include "core/tokenizer/tokenizer.h"

namespace petrel {
namespace {

class GrammarStage final : public SamplerStage {
 public:
  explicit GrammarStage(std::shared_ptr<GrammarMatcher> matcher) : matcher_(std::move(matcher)) {}
  const char* Name() const override { return "grammar"; }
  void Apply(Candidates& c, SamplerContext&) override {
    if (!matcher_->error().ok() || !matcher_->ComputeMask(&allowed_).ok()) return;
    const auto forbidden = [&](const Candidate& item) {
      return size_t(item.id) >= allowed_.size() || !allowed_[size_t(item.id)];
    };
    if (std::all_of(c.items.begin(), c.items.end(), forbidden)) return;
    // remove_if keeps the order, so candidates still sorted stay sorted.
    c.items.erase(std::remove_if(c.items.begin(), c.items.end(), forbidden), c.items.end());
  }
  void Accept(int32_t token) override {
    if (matcher_->error().ok()) (void)matcher_->AcceptToken(token);
  }

 private:
  std::shared_ptr<GrammarMatcher> matcher_;
  std::vector<uint8_t> allowed_;  // (n_vocab)
};

}  // namespace

Result<std::shared_ptr<GrammarMatcher>> CompileGrammarConstraint(std::string_view text,
                                                                 const Tokenizer& tokenizer,
                                                                 size_t n_vocab) {
  auto grammar = CompileGrammar(text);
  if (!grammar.ok()) return grammar.status().Wrap("grammar");
  std::vector<std::string> token_bytes(n_vocab);
  std::vector<int32_t> end_tokens;
  const size_t n_known = std::min(n_vocab, tokenizer.n_vocab());
  for (size_t id = 0; id < n_known; ++id) {
    if (tokenizer.IsEndOfGeneration(int32_t(id))) {
      end_tokens.push_back(int32_t(id));
    } else {
      token_bytes[id] = tokenizer.TokenBytes(int32_t(id));
    }
  }
  PETREL_RETURN_IF_ERROR(CheckGrammarSpelling(**grammar, token_bytes));
  auto vocab = std::make_shared<const VocabTrie>(token_bytes, std::move(end_tokens));
  PETREL_ASSIGN_OR_RETURN(std::unique_ptr<GrammarMatcher> matcher,
                          GrammarMatcher::Create(std::move(grammar).value(), std::move(vocab)));
  return std::shared_ptr<GrammarMatcher>(std::move(matcher));
}

std::unique_ptr<SamplerStage> MakeGrammarStage(std::shared_ptr<GrammarMatcher> matcher) {
  return std::make_unique<GrammarStage>(std::move(matcher));
}

}  // namespace petrel
