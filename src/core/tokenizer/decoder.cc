// StreamDecoder: incremental detokenization with a sliding window of ids (HF DecodeStream).
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/unicode.h"

namespace petrel {
namespace {

bool EndsWithReplacement(const std::string& text) {
  return text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

void StreamDecoder::Reset() {
  window_.clear();
  prefix_.clear();
  prefix_ids_ = 0;
}

std::string StreamDecoder::Push(int32_t id) {
  window_.push_back(id);
  const std::string text = tokenizer_.Decode(window_, skip_special_);
  // Hold back while nothing new is final: no growth, or a trailing U+FFFD that a later byte
  // token may still complete.
  if (text.size() <= prefix_.size() || EndsWithReplacement(text)) return {};
  if (text.compare(0, prefix_.size(), prefix_) != 0) {
    // The window's decode changed its earlier part (a decoder that is not prefix-stable). Keep
    // the whole window so that Flush() stays consistent; emit nothing now.
    return {};
  }
  std::string fresh = text.substr(prefix_.size());
  // Keep the ids since the previous emission as context for the next decode; they are the
  // only ones whose decoding can still interact with what comes next.
  const size_t keep_from = prefix_ids_;
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(keep_from));
  prefix_ids_ = window_.size();
  prefix_ = tokenizer_.Decode(window_, skip_special_);
  return fresh;
}

std::string StreamDecoder::Flush() {
  const std::string text = tokenizer_.Decode(window_, skip_special_);
  std::string rest = text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0
                         ? text.substr(prefix_.size())
                         : std::string();
  Reset();
  return rest;
}

}  // namespace petrel
