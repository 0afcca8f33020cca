// What users wrote stays text. A chat prompt is rendered to text and tokenized with special
// tokens parsed, because the template spells its own control tokens; without more, a user's
// "</s>" or "<|im_end|>" in a message would become that control token and end the turn early
// (a prompt injection). So before rendering, each spelling of a special token inside a string of
// the messages (or tools) is wrapped in markers that occur nowhere in the input; after rendering,
// the markers are removed and the ranges they enclosed become the tokenizer's plain spans.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace petrel {

struct UserTextMarkers {
  std::string open, close;
};

// Markers (Unicode noncharacters around random hex digits) found in none of `inputs`' dumps.
UserTextMarkers ChooseMarkers(const std::vector<const nlohmann::ordered_json*>& inputs);

// The texts of the tokenizer's special tokens: those matched only when special tokens are
// parsed.
std::vector<std::string> SpecialTexts(const Tokenizer& tokenizer);

// Wraps every occurrence of one of `specials` in the strings of `value` (object keys excepted)
// in the markers; overlapping occurrences share one pair. False when nothing was wrapped.
bool MarkSpecialTexts(nlohmann::ordered_json* value, const std::vector<std::string>& specials,
                      const UserTextMarkers& markers);

// Removes the markers from `text` and returns the ranges they enclosed, in the text without
// them. An opening marker without its closing one (a template that cut the string) encloses up
// to the end of the text; a stray closing marker is dropped.
std::vector<TextSpan> TakeMarkedSpans(std::string* text, const UserTextMarkers& markers);

}  // namespace petrel
