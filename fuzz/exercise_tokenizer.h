// What the tokenizer targets do with a tokenizer that loaded: encode a text that touches every
// pipeline stage (spaces, digits, punctuation, accents, CJK, emoji, invalid UTF-8, spelled
// special tokens), decode the ids back, and read the pieces, so that a vocabulary that loads
// but breaks the encoder or decoder is found too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace petrel::fuzz {

inline void ExerciseTokenizer(const Tokenizer& tokenizer) {
  static constexpr std::string_view kText =
      "Hello  world!\n\t 123,456 don't  Ünïcödé café 東京 🦀 \xff\xfe\xc3 "
      "<s></s><|endoftext|>"
      "<|im_start|>user [CLS] ##ing ▁x";
  for (bool parse_special : {false, true}) {
    EncodeOptions options;
    options.parse_special = parse_special;
    std::vector<int32_t> ids = tokenizer.Encode(kText, options);
    (void)tokenizer.Decode(ids, /*skip_special=*/true);
    (void)tokenizer.Decode(ids, /*skip_special=*/false);
  }
  const int32_t n = int32_t(std::min<size_t>(tokenizer.n_vocab(), 512));
  std::vector<int32_t> all;
  for (int32_t id = 0; id < n; ++id) {
    (void)tokenizer.TokenText(id);
    (void)tokenizer.TokenBytes(id);
    (void)tokenizer.IsSpecial(id);
    (void)tokenizer.IsEndOfGeneration(id);
    all.push_back(id);
  }
  (void)tokenizer.Decode(all, /*skip_special=*/false);
}

}  // namespace petrel::fuzz
