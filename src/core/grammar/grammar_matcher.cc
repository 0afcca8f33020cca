// GrammarMatcher: parse stacks as persistent linked frames (a push shares the stack below it),
// deduplicated by content hash and checked frame by frame; the token mask is a depth-first walk
// of the vocabulary trie in which each character's successor set is memoised per walk, so that
// the many tokens a loop like `[^"]*` allows cost a table lookup per trie node.
#include "core/grammar/grammar_matcher.h"

#include <algorithm>

namespace petrel {
namespace {

constexpr uint64_t kEmptyHash = 0x243F6A8885A308D3ull;
constexpr size_t kLinearScanMax = 32;  // sets up to this size are searched without an index

uint64_t Mix(uint64_t hash, uint64_t value) {
  uint64_t x = hash ^ (value * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const VocabTrie> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {}

Result<std::unique_ptr<GrammarMatcher>> GrammarMatcher::Create(
    std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> vocab) {
  std::unique_ptr<GrammarMatcher> matcher(new GrammarMatcher(std::move(grammar), std::move(vocab)));
  GrammarMatcher& m = *matcher;
  m.scratch_.clear();
  m.expanded_.clear();
  m.expand_steps_ = 0;
  for (uint32_t alt : m.grammar_->rules[m.grammar_->root]) {
    m.Expand(m.grammar_->elements[alt].kind == ElementKind::kEnd ? kEmpty : m.Push(kEmpty, alt));
  }
  const SetSpan set = m.FinishScratch();
  PETREL_RETURN_IF_ERROR(m.Overflowed());
  m.Compact(set);
  return matcher;
}

uint64_t GrammarMatcher::StackHash(uint32_t stack) const {
  return stack == kEmpty ? kEmptyHash : frames_[stack].hash;
}

uint32_t GrammarMatcher::Push(uint32_t parent, uint32_t pos) {
  frames_.push_back(Frame{pos, parent, Mix(StackHash(parent), pos)});
  return uint32_t(frames_.size() - 1);
}

bool GrammarMatcher::SameStack(uint32_t a, uint32_t b) const {
  while (a != b) {
    if (a == kEmpty || b == kEmpty) return false;
    const Frame& fa = frames_[a];
    const Frame& fb = frames_[b];
    if (fa.hash != fb.hash || fa.pos != fb.pos) return false;
    a = fa.parent;
    b = fb.parent;
  }
  return true;
}

bool GrammarMatcher::SameSet(const SetSpan& a, const SetSpan& b) const {
  if (a.size != b.size || a.signature != b.signature) return false;
  if (a.offset == b.offset) return true;
  for (uint32_t i = 0; i < a.size; ++i) {
    if (!SameStack(set_pool_[a.offset + i], set_pool_[b.offset + i])) return false;
  }
  return true;
}

namespace {

// Finds a stack equal to `stack` in `list`, through `index` once the list is long.
template <typename Same, typename HashOf>
bool FindStack(const std::vector<uint32_t>& list, std::unordered_map<uint64_t, uint32_t>& index,
               uint64_t hash, uint32_t stack, const Same& same, const HashOf& hash_of) {
  if (list.size() > kLinearScanMax) {
    auto it = index.find(hash);
    if (it == index.end()) return false;
    if (same(it->second, stack)) return true;
    // A hash collision between different stacks: fall back to a scan.
  }
  for (uint32_t other : list) {
    if (hash_of(other) == hash && same(other, stack)) return true;
  }
  return false;
}

}  // namespace

void GrammarMatcher::AddToScratch(uint32_t stack) {
  const uint64_t hash = StackHash(stack);
  auto same = [this](uint32_t a, uint32_t b) { return SameStack(a, b); };
  auto hash_of = [this](uint32_t s) { return StackHash(s); };
  if (FindStack(scratch_, scratch_index_, hash, stack, same, hash_of)) return;
  if (scratch_.size() == kLinearScanMax) {
    scratch_index_.clear();
    for (uint32_t s : scratch_) scratch_index_.emplace(StackHash(s), s);
  }
  scratch_.push_back(stack);
  if (scratch_.size() > kLinearScanMax) scratch_index_.emplace(hash, stack);
  if (scratch_.size() > grammar_->limits.max_stacks) overflow_ = true;
}

void GrammarMatcher::Expand(uint32_t stack) {
  const auto& elements = grammar_->elements;
  const size_t max_steps = 64 * grammar_->limits.max_stacks;
  auto same = [this](uint32_t a, uint32_t b) { return SameStack(a, b); };
  auto hash_of = [this](uint32_t s) { return StackHash(s); };
  work_.clear();
  work_.push_back(stack);
  while (!work_.empty() && !overflow_) {
    const uint32_t s = work_.back();
    work_.pop_back();
    if (++expand_steps_ > max_steps) {
      overflow_ = true;
      return;
    }
    if (s == kEmpty || elements[frames_[s].pos].kind == ElementKind::kChars) {
      AddToScratch(s);
      continue;
    }
    // A rule reference on top: replace it by each alternative of the rule, above the rest of
    // its own alternative. Equal stacks expand equally, so each is expanded once per step.
    const uint64_t hash = StackHash(s);
    if (FindStack(expanded_, expanded_index_, hash, s, same, hash_of)) continue;
    if (expanded_.size() == kLinearScanMax) {
      expanded_index_.clear();
      for (uint32_t e : expanded_) expanded_index_.emplace(StackHash(e), e);
    }
    expanded_.push_back(s);
    if (expanded_.size() > kLinearScanMax) expanded_index_.emplace(hash, s);
    const Frame frame = frames_[s];
    const uint32_t next = frame.pos + 1;
    const uint32_t base =
        elements[next].kind == ElementKind::kEnd ? frame.parent : Push(frame.parent, next);
    for (uint32_t alt : grammar_->rules[elements[frame.pos].value]) {
      work_.push_back(elements[alt].kind == ElementKind::kEnd ? base : Push(base, alt));
    }
  }
}

GrammarMatcher::SetSpan GrammarMatcher::FinishScratch() {
  std::sort(scratch_.begin(), scratch_.end(), [this](uint32_t a, uint32_t b) {
    const uint64_t ha = StackHash(a), hb = StackHash(b);
    return ha < hb || (ha == hb && a < b);
  });
  SetSpan span{uint32_t(set_pool_.size()), uint32_t(scratch_.size()), kEmptyHash};
  for (uint32_t s : scratch_) span.signature = Mix(span.signature, StackHash(s));
  set_pool_.insert(set_pool_.end(), scratch_.begin(), scratch_.end());
  scratch_.clear();
  scratch_index_.clear();
  expanded_.clear();
  expanded_index_.clear();
  expand_steps_ = 0;
  return span;
}

GrammarMatcher::SetSpan GrammarMatcher::Advance(const SetSpan& set, uint32_t cpt) {
  const auto& elements = grammar_->elements;
  for (uint32_t i = 0; i < set.size && !overflow_; ++i) {
    const uint32_t s = set_pool_[set.offset + i];
    if (s == kEmpty) continue;
    const Frame frame = frames_[s];
    if (!grammar_->classes[elements[frame.pos].value].Matches(cpt)) continue;
    const uint32_t next = frame.pos + 1;
    Expand(elements[next].kind == ElementKind::kEnd ? frame.parent : Push(frame.parent, next));
  }
  if (overflow_) scratch_.clear();
  return FinishScratch();
}

GrammarMatcher::SetSpan GrammarMatcher::AdvanceMemo(const SetSpan& set, uint32_t cpt) {
  const uint64_t key = Mix(set.signature, cpt);
  auto [first, last] = memo_.equal_range(key);
  for (auto it = first; it != last; ++it) {
    const MemoEntry& entry = memo_entries_[it->second];
    if (entry.cpt == cpt && SameSet(entry.in, set)) return entry.out;
  }
  const SetSpan out = Advance(set, cpt);
  memo_.emplace(key, uint32_t(memo_entries_.size()));
  memo_entries_.push_back(MemoEntry{set, cpt, out});
  return out;
}

bool GrammarMatcher::PartialPossible(const SetSpan& set, const Utf8State& utf8) const {
  const uint32_t shift = 6u * utf8.remaining;
  const uint32_t first = std::max(utf8.value << shift, utf8.min);
  const uint32_t last = (utf8.value << shift) | ((1u << shift) - 1);
  if (first > last || first > 0x10FFFF) return false;
  const auto& elements = grammar_->elements;
  for (uint32_t i = 0; i < set.size; ++i) {
    const uint32_t s = set_pool_[set.offset + i];
    if (s == kEmpty) continue;
    if (grammar_->classes[elements[frames_[s].pos].value].MatchesAnyIn(first, last)) return true;
  }
  return false;
}

bool GrammarMatcher::StepByte(const SetSpan& set, Utf8State* utf8, uint8_t byte, SetSpan* next) {
  uint32_t cpt = 0;
  if (utf8->remaining == 0) {
    if (byte < 0x80) {
      cpt = byte;
    } else {
      if (byte >= 0xC2 && byte <= 0xDF) {
        *utf8 = Utf8State{uint32_t(byte & 0x1F), 1, 0x80};
      } else if ((byte & 0xF0) == 0xE0) {
        *utf8 = Utf8State{uint32_t(byte & 0x0F), 2, 0x800};
      } else if (byte >= 0xF0 && byte <= 0xF4) {
        *utf8 = Utf8State{uint32_t(byte & 0x07), 3, 0x10000};
      } else {
        return false;
      }
      *next = set;
      return PartialPossible(set, *utf8);
    }
  } else {
    if ((byte & 0xC0) != 0x80) return false;
    utf8->value = (utf8->value << 6) | (byte & 0x3F);
    --utf8->remaining;
    if (utf8->remaining > 0) {
      *next = set;
      return PartialPossible(set, *utf8);
    }
    cpt = utf8->value;
    if (cpt < utf8->min || cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) return false;
    *utf8 = Utf8State{};
  }
  *next = AdvanceMemo(set, cpt);
  return next->size > 0;
}

Status GrammarMatcher::Overflowed() const {
  if (!overflow_) return Status::Ok();
  return Error("grammar: matching needs more than %zu parse stacks (the grammar is too ambiguous)",
               grammar_->limits.max_stacks);
}

Status GrammarMatcher::ComputeMask(std::vector<uint8_t>* allowed) {
  allowed->assign(vocab_ ? vocab_->n_vocab() : 0, 0);
  if (!vocab_ || ended_) return Status::Ok();
  std::vector<uint32_t> state = StateKey();
  for (const CachedMask& cached : mask_cache_) {
    if (cached.state == state) {
      *allowed = cached.mask;
      return Status::Ok();
    }
  }
  if (CanEnd()) {
    for (int32_t token : vocab_->end_tokens()) (*allowed)[size_t(token)] = 1;
  }
  const size_t frames_mark = frames_.size();
  const size_t pool_mark = set_pool_.size();
  memo_.clear();
  memo_entries_.clear();
  struct Visit {
    uint32_t node;
    SetSpan set;
    Utf8State utf8;
  };
  std::vector<Visit> visits = {{0, committed_, committed_utf8_}};
  const auto& nodes = vocab_->nodes();
  const auto& token_ids = vocab_->token_ids();
  while (!visits.empty() && !overflow_) {
    const Visit visit = visits.back();
    visits.pop_back();
    const VocabTrie::Node& node = nodes[visit.node];
    for (uint32_t c = node.first_child; c < node.first_child + node.n_children; ++c) {
      const VocabTrie::Node& child = nodes[c];
      Utf8State utf8 = visit.utf8;
      SetSpan next{0, 0, 0};
      if (!StepByte(visit.set, &utf8, child.byte, &next)) continue;
      for (uint32_t t = child.first_token; t < child.first_token + child.n_tokens; ++t) {
        (*allowed)[size_t(token_ids[t])] = 1;
      }
      if (child.n_children > 0) visits.push_back({c, next, utf8});
    }
  }
  frames_.resize(frames_mark);
  set_pool_.resize(pool_mark);
  memo_.clear();
  memo_entries_.clear();
  Status status = Overflowed();
  overflow_ = false;
  if (status.ok() && std::find(allowed->begin(), allowed->end(), 1) == allowed->end()) {
    status = Error("grammar: no token of the vocabulary can continue the text");
  }
  if (!status.ok() && error_.ok()) error_ = status;
  if (status.ok()) {
    if (mask_cache_.size() < kCachedMasks) {
      mask_cache_.push_back(CachedMask{std::move(state), *allowed});
    } else {
      mask_cache_[mask_cache_next_] = CachedMask{std::move(state), *allowed};
      mask_cache_next_ = (mask_cache_next_ + 1) % kCachedMasks;
    }
  }
  return status;
}

std::vector<uint32_t> GrammarMatcher::StateKey() const {
  std::vector<uint32_t> key = {committed_utf8_.value, committed_utf8_.remaining,
                               committed_utf8_.min};
  for (uint32_t i = 0; i < committed_.size; ++i) {
    for (uint32_t s = set_pool_[committed_.offset + i]; s != kEmpty; s = frames_[s].parent) {
      key.push_back(frames_[s].pos);
    }
    key.push_back(kEmpty);  // ends the stack
  }
  return key;
}

Status GrammarMatcher::AcceptToken(int32_t token) {
  Status status = AcceptTokenBytes(token);
  if (!status.ok() && error_.ok()) error_ = status;
  return status;
}

Status GrammarMatcher::AcceptTokenBytes(int32_t token) {
  if (ended_) return Error("grammar: token %d after the end of the text", token);
  if (!vocab_ || token < 0 || size_t(token) >= vocab_->n_vocab()) {
    return Error("grammar: token %d is outside the vocabulary", token);
  }
  const auto& ends = vocab_->end_tokens();
  if (std::find(ends.begin(), ends.end(), token) != ends.end()) {
    if (!CanEnd()) return Error("grammar: end token %d before the grammar is complete", token);
    ended_ = true;
    return Status::Ok();
  }
  const std::string& bytes = vocab_->bytes(token);
  if (bytes.empty()) return Error("grammar: token %d has no text to match", token);
  return AcceptBytes(bytes);
}

Status GrammarMatcher::AcceptBytes(std::string_view bytes) {
  if (ended_) return Error("grammar: text after the end");
  const size_t frames_mark = frames_.size();
  const size_t pool_mark = set_pool_.size();
  memo_.clear();
  memo_entries_.clear();
  SetSpan set = committed_;
  Utf8State utf8 = committed_utf8_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    SetSpan next{0, 0, 0};
    if (!StepByte(set, &utf8, uint8_t(bytes[i]), &next)) {
      frames_.resize(frames_mark);
      set_pool_.resize(pool_mark);
      memo_.clear();
      memo_entries_.clear();
      const Status overflow = Overflowed();
      overflow_ = false;
      PETREL_RETURN_IF_ERROR(overflow);
      return Error("grammar: the text does not match at byte %zu of %zu", i, bytes.size());
    }
    set = next;
  }
  committed_utf8_ = utf8;
  memo_.clear();
  memo_entries_.clear();
  Compact(set);
  return Status::Ok();
}

void GrammarMatcher::Compact(const SetSpan& set) {
  std::vector<Frame> frames;
  std::unordered_map<uint32_t, uint32_t> moved;  // old frame -> new frame
  std::vector<uint32_t> stacks;
  std::vector<uint32_t> chain;
  for (uint32_t i = 0; i < set.size; ++i) {
    uint32_t s = set_pool_[set.offset + i];
    chain.clear();
    while (s != kEmpty && !moved.count(s)) {
      chain.push_back(s);
      s = frames_[s].parent;
    }
    uint32_t below = s == kEmpty ? kEmpty : moved[s];
    for (size_t k = chain.size(); k-- > 0;) {
      const Frame& old = frames_[chain[k]];
      frames.push_back(Frame{old.pos, below, old.hash});
      below = uint32_t(frames.size() - 1);
      moved.emplace(chain[k], below);
    }
    stacks.push_back(below);
  }
  const uint64_t signature = set.signature;
  frames_ = std::move(frames);
  set_pool_ = std::move(stacks);
  committed_ = SetSpan{0, uint32_t(set_pool_.size()), signature};
}

bool GrammarMatcher::CanEnd() const {
  if (committed_utf8_.remaining != 0) return false;
  for (uint32_t i = 0; i < committed_.size; ++i) {
    if (set_pool_[committed_.offset + i] == kEmpty) return true;
  }
  return false;
}

bool GrammarMatcher::CanContinue() const {
  for (uint32_t i = 0; i < committed_.size; ++i) {
    if (set_pool_[committed_.offset + i] != kEmpty) return true;
  }
  return false;
}

}  // namespace petrel
