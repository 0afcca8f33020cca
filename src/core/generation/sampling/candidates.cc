// Candidates: sorting and softmax shared by the sampler stages.
#include "core/generation/sampling/candidates.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace petrel {
namespace {

// An unsigned key whose ascending order is Ahead()'s logit order: larger logits give smaller
// keys, and -0 and +0 (equal as floats) give the same key.
uint32_t DescendingKey(float logit) {
  if (logit == 0.0f) logit = 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &logit, sizeof bits);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return ~ascending;
}

bool InIdOrder(const std::vector<Candidate>& items) {
  for (size_t i = 1; i < items.size(); ++i) {
    if (items[i].id <= items[i - 1].id) return false;
  }
  return true;
}

// Stable least-significant-digit radix sort on DescendingKey, 8 bits a pass. Input in id order
// keeps ties in id order, which is Ahead()'s tie rule. Passes whose byte is the same in every
// key are skipped.
void RadixSort(std::vector<Candidate>& items, std::vector<Candidate>& scratch,
               std::vector<uint32_t>& keys, std::vector<uint32_t>& scratch_keys) {
  const size_t n = items.size();
  scratch.resize(n);
  keys.resize(n);
  scratch_keys.resize(n);
  for (size_t i = 0; i < n; ++i) keys[i] = DescendingKey(items[i].logit);
  for (int shift = 0; shift < 32; shift += 8) {
    size_t count[257] = {};
    for (uint32_t key : keys) ++count[((key >> shift) & 0xff) + 1];
    if (count[((keys[0] >> shift) & 0xff) + 1] == n) continue;
    for (size_t b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (size_t i = 0; i < n; ++i) {
      const size_t at = count[(keys[i] >> shift) & 0xff]++;
      scratch[at] = items[i];
      scratch_keys[at] = keys[i];
    }
    items.swap(scratch);
    keys.swap(scratch_keys);
  }
}

}  // namespace

void Candidates::Reset(const float* logits, size_t n_vocab) {
  items.resize(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) items[i] = {int32_t(i), logits[i], 0.0f};
  sorted = false;
}

void Candidates::Sort() {
  if (sorted) return;
  // A comparison sort of a 32k vocabulary is milliseconds; with 32 sequences a step that is
  // most of the step. Fresh candidates are in id order, where the radix sort applies.
  if (items.size() > 256 && InIdOrder(items)) {
    RadixSort(items, scratch_, keys_, scratch_keys_);
  } else {
    std::sort(items.begin(), items.end(), Ahead);
  }
  sorted = true;
}

void Candidates::SortFirst(size_t n) {
  if (sorted || n >= items.size()) {
    Sort();
    KeepFirst(n);
    return;
  }
  n = std::max<size_t>(n, 1);
  std::nth_element(items.begin(), items.begin() + long(n - 1), items.end(), Ahead);
  items.resize(n);
  std::sort(items.begin(), items.end(), Ahead);
  sorted = true;
}

size_t Candidates::Best() const {
  if (sorted || items.empty()) return 0;
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    if (Ahead(items[i], items[best])) best = i;
  }
  return best;
}

void Candidates::Softmax() {
  Sort();
  if (items.empty()) return;
  const float max_logit = items[0].logit;
  double sum = 0.0;
  for (Candidate& c : items) {
    c.prob = std::isinf(c.logit) && c.logit < 0 ? 0.0f : std::exp(c.logit - max_logit);
    sum += c.prob;
  }
  for (Candidate& c : items) c.prob = float(c.prob / sum);
}

void Candidates::KeepFirst(size_t n) {
  if (n < items.size()) items.resize(std::max<size_t>(n, 1));
}

}  // namespace petrel
