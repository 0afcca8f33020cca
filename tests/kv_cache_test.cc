// Paged KV cache bookkeeping: block tables, slots, exhaustion, fork with copy-on-write, truncate,
// and the prefix cache: registration, reuse, refcounts, least-recently-used eviction.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <span>
#include <vector>

#include "core/runtime/backend_registry.h"
#include "core/runtime/kv_cache.h"

namespace petrel {
namespace {

struct Fixture {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<KvCache> cache;
};

Fixture Make(size_t n_blocks, size_t block_tokens, size_t context, DType dtype = DType::kF32) {
  Fixture f;
  f.backend = std::move(CreateBackend("cpu", 0, {}).value());
  KvCacheOptions options;
  options.n_blocks = n_blocks;
  options.block_tokens = block_tokens;
  options.context = context;
  options.dtype = dtype;
  auto cache = KvCache::Create({f.backend.get(), f.backend.get()}, 8, options);
  EXPECT_TRUE(cache.ok()) << cache.status().message();
  f.cache = std::move(cache).value();
  return f;
}

TEST(KvCache, SlotsFollowTheBlockTable) {
  auto f = Make(8, 4, 64);
  const SeqId a = f.cache->NewSequence();
  const SeqId b = f.cache->NewSequence();
  auto slots_a = f.cache->Append(a, 6);
  auto slots_b = f.cache->Append(b, 3);
  ASSERT_TRUE(slots_a.ok() && slots_b.ok());
  const auto& table_a = f.cache->BlockTable(a);
  ASSERT_EQ(table_a.size(), 2u);
  for (size_t pos = 0; pos < 6; ++pos) {
    EXPECT_EQ((*slots_a)[pos], table_a[pos / 4] * 4 + int32_t(pos % 4));
  }
  EXPECT_EQ(f.cache->free_blocks(), 8u - 3u);
  f.cache->FreeSequence(a);
  EXPECT_EQ(f.cache->free_blocks(), 8u - 1u);
}

// HostRows names, in place, the bytes ReadRows copies out: per layer the K then the V rows, in
// position order, across blocks that are not adjacent.
TEST(KvCache, HostRowsAreTheRowsReadRowsCopies) {
  auto f = Make(8, 4, 64, DType::kF16);
  const SeqId a = f.cache->NewSequence();
  const SeqId b = f.cache->NewSequence();
  ASSERT_TRUE(f.cache->Append(a, 3).ok());
  ASSERT_TRUE(f.cache->Append(b, 4).ok());
  ASSERT_TRUE(f.cache->Append(a, 4).ok());  // a's second block comes after b's
  const size_t row_bytes = f.cache->row_bytes(), length = f.cache->Length(a);
  std::vector<uint8_t> written(length * row_bytes);
  for (size_t layer = 0; layer < f.cache->n_layers(); ++layer) {
    for (size_t i = 0; i < written.size(); ++i) written[i] = uint8_t(i * 7 + layer * 31 + 1);
    std::vector<uint8_t> v = written;
    for (uint8_t& x : v) x = uint8_t(x ^ 0x5a);
    ASSERT_TRUE(f.cache->WriteRows(a, layer, written.data(), v.data()).ok());
  }
  const auto rows = f.cache->HostRows(a);
  ASSERT_EQ(rows.size(), f.cache->n_layers() * 2 * 2);  // 2 blocks each for K and V
  std::vector<uint8_t> in_place;
  for (std::span<const uint8_t> span : rows) in_place.insert(in_place.end(), span.begin(), span.end());
  std::vector<uint8_t> copied;
  for (size_t layer = 0; layer < f.cache->n_layers(); ++layer) {
    std::vector<uint8_t> k(length * row_bytes), v(length * row_bytes);
    ASSERT_TRUE(f.cache->ReadRows(a, layer, k.data(), v.data()).ok());
    copied.insert(copied.end(), k.begin(), k.end());
    copied.insert(copied.end(), v.begin(), v.end());
  }
  EXPECT_EQ(in_place, copied);
  EXPECT_TRUE(f.cache->HostRows(99).empty());
}

// Pages of [data, data + bytes) in memory now (mincore), or nothing where it cannot tell.
std::optional<size_t> ResidentPages(const uint8_t* data, size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const size_t pages = (reinterpret_cast<uintptr_t>(data) + bytes - begin + page - 1) / page;
  std::vector<unsigned char> in(pages);
  if (mincore(reinterpret_cast<void*>(begin), pages * page, in.data()) != 0) return std::nullopt;
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

// KvCacheOptions::touch: a server's pool is real memory from the start; otherwise its pages
// come as rows are written.
TEST(KvCache, TouchMakesThePoolResidentAtCreation) {
  for (const bool touch : {false, true}) {
    auto backend = std::move(CreateBackend("cpu", 0, {}).value());
    KvCacheOptions options;
    options.n_blocks = 512;  // x 16 tokens x 256 f32 = 8 MiB each for K and V
    options.block_tokens = 16;
    options.context = 8192;
    options.touch = touch;
    auto cache = KvCache::Create({backend.get()}, 256, options);
    ASSERT_TRUE(cache.ok()) << cache.status().message();
    const SeqId seq = (*cache)->NewSequence();
    ASSERT_TRUE((*cache)->Append(seq, 8192).ok());
    const auto rows = (*cache)->HostRows(seq);
    ASSERT_FALSE(rows.empty());
    size_t bytes = 0;
    for (std::span<const uint8_t> span : rows) bytes += span.size();
    ASSERT_EQ(bytes, size_t(2) * 8192 * 256 * sizeof(float));
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    size_t resident = 0;
    for (std::span<const uint8_t> span : rows) {
      const std::optional<size_t> pages_in = ResidentPages(span.data(), span.size());
      if (!pages_in) GTEST_SKIP() << "mincore cannot tell resident pages here";
      resident += *pages_in;
    }
    // Blocks of 16 KiB, each counted by its own pages: those of K and those of V.
    const size_t pages = bytes / page;
    if (touch) {
      EXPECT_GE(resident, pages) << "touched pool not resident";
      for (std::span<const uint8_t> span : rows) {
        for (uint8_t byte : span) ASSERT_EQ(byte, 0);
      }
    } else if (const char* perturb = std::getenv("MALLOC_PERTURB_");
               perturb == nullptr || std::atoi(perturb) == 0) {
      // (glibc's MALLOC_PERTURB_, which meson test sets, fills every allocation: then the
      // untouched pool is resident too.)
      EXPECT_LT(resident, pages / 2) << "an untouched pool was already resident";
    }
  }
}

TEST(KvCache, ExhaustionAndContextAreErrorsThatChangeNothing) {
  auto f = Make(2, 4, 64);
  const SeqId a = f.cache->NewSequence();
  EXPECT_FALSE(f.cache->Append(a, 9).ok());  // needs 3 blocks of 2
  EXPECT_EQ(f.cache->Length(a), 0u);
  EXPECT_EQ(f.cache->free_blocks(), 2u);
  auto g = Make(100, 4, 10);
  const SeqId b = g.cache->NewSequence();
  EXPECT_FALSE(g.cache->Append(b, 11).ok());
  EXPECT_TRUE(g.cache->Append(b, 10).ok());
  EXPECT_FALSE(g.cache->Append(99, 1).ok());
}

TEST(KvCache, ForkSharesBlocksAndCopiesOnWrite) {
  auto f = Make(8, 4, 64);
  const SeqId a = f.cache->NewSequence();
  ASSERT_TRUE(f.cache->Append(a, 6).ok());
  // Mark the shared partial block's contents so the copy can be checked.
  BackendBuffer& k = *f.cache->LayerView(0).k;
  const int32_t shared_block = f.cache->BlockTable(a)[1];
  auto row_offset = [](int32_t block) { return (size_t(block) * 4 + 1) * 8 * sizeof(float); };
  float mark[8];
  for (size_t i = 0; i < 8; ++i) mark[i] = 42.0f + float(i);
  ASSERT_TRUE(f.backend->CopyFromHost(mark, k, row_offset(shared_block), sizeof(mark)).ok());
  auto child = f.cache->Fork(a);
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(f.cache->BlockTable(*child), f.cache->BlockTable(a));
  EXPECT_EQ(f.cache->free_blocks(), 6u);
  auto slots = f.cache->Append(*child, 1);  // writes into the shared, partly filled block
  ASSERT_TRUE(slots.ok());
  const int32_t own_block = f.cache->BlockTable(*child)[1];
  EXPECT_NE(own_block, shared_block);
  EXPECT_EQ(f.cache->BlockTable(*child)[0], f.cache->BlockTable(a)[0]);
  float copied[8];
  ASSERT_TRUE(f.backend->CopyToHost(k, row_offset(own_block), copied, sizeof(copied)).ok());
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(copied[i], 42.0f + float(i));
  f.cache->FreeSequence(a);
  f.cache->FreeSequence(*child);
  EXPECT_EQ(f.cache->free_blocks(), 8u);
}

TEST(KvCache, TruncateReturnsBlocks) {
  auto f = Make(8, 4, 64);
  const SeqId a = f.cache->NewSequence();
  ASSERT_TRUE(f.cache->Append(a, 9).ok());
  EXPECT_EQ(f.cache->free_blocks(), 5u);
  ASSERT_TRUE(f.cache->Truncate(a, 4).ok());
  EXPECT_EQ(f.cache->Length(a), 4u);
  EXPECT_EQ(f.cache->free_blocks(), 7u);
  EXPECT_FALSE(f.cache->Truncate(a, 5).ok());
}

// A sequence of `tokens.size()` tokens whose full blocks are registered.
SeqId Computed(KvCache& cache, const std::vector<int32_t>& tokens) {
  const SeqId seq = cache.NewSequence();
  EXPECT_TRUE(cache.Append(seq, tokens.size()).ok());
  cache.CacheBlocks(seq, tokens);
  return seq;
}

TEST(KvPrefixCache, ANewSequenceReusesTheFullBlocksItStartsWith) {
  auto f = Make(8, 4, 64);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const SeqId a = Computed(*f.cache, tokens);
  EXPECT_EQ(f.cache->FindPrefix(tokens).blocks, 2u);  // the partial third block is not cached
  EXPECT_EQ(f.cache->FindPrefix(tokens).idle_blocks, 0u);
  size_t reused = 0;
  const SeqId b = f.cache->NewSequenceFromPrefix(tokens, &reused);
  EXPECT_EQ(reused, 8u);
  EXPECT_EQ(f.cache->Length(b), 8u);
  const auto& table_a = f.cache->BlockTable(a);
  EXPECT_EQ(f.cache->BlockTable(b), std::vector<int32_t>(table_a.begin(), table_a.begin() + 2));
  EXPECT_EQ(f.cache->free_blocks(), 5u);  // shared, not copied
  // A different second block, or the same tokens after a different first one, do not match.
  EXPECT_EQ(f.cache->FindPrefix(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 0}).blocks, 1u);
  EXPECT_EQ(f.cache->FindPrefix(std::vector<int32_t>{0, 2, 3, 4, 5, 6, 7, 8}).blocks, 0u);
  EXPECT_EQ(f.cache->FindPrefix(std::vector<int32_t>{1, 2, 3}).blocks, 0u);
  // Freeing the first user keeps the blocks for the second; freeing both keeps them cached.
  f.cache->FreeSequence(a);
  EXPECT_EQ(f.cache->cached_blocks(), 0u);
  EXPECT_EQ(f.cache->free_blocks(), 6u);
  f.cache->FreeSequence(b);
  EXPECT_EQ(f.cache->cached_blocks(), 2u);
  EXPECT_EQ(f.cache->free_blocks(), 8u);  // cached blocks count as free
  EXPECT_EQ(f.cache->FindPrefix(tokens).idle_blocks, 2u);
  const SeqId c = f.cache->NewSequenceFromPrefix(tokens, &reused);
  EXPECT_EQ(reused, 8u);
  EXPECT_EQ(f.cache->cached_blocks(), 0u);
  ASSERT_TRUE(f.cache->Append(c, 2).ok());  // continues after the reused blocks
  EXPECT_EQ(f.cache->Length(c), 10u);
}

// Blocks computed under one prefix key (a LoRA adapter set) are found under that key only, and
// each key registers its own copy of the same tokens.
TEST(KvPrefixCache, PrefixKeysNeverShareBlocks) {
  auto f = Make(8, 4, 64);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const SeqId a = f.cache->NewSequence(/*prefix_key=*/7);
  ASSERT_TRUE(f.cache->Append(a, tokens.size()).ok());
  f.cache->CacheBlocks(a, tokens);
  EXPECT_EQ(f.cache->FindPrefix(tokens, 7).blocks, 2u);
  EXPECT_EQ(f.cache->FindPrefix(tokens, 0).blocks, 0u);
  EXPECT_EQ(f.cache->FindPrefix(tokens, 8).blocks, 0u);
  size_t reused = 1;
  const SeqId b = f.cache->NewSequenceFromPrefix(tokens, &reused, 9);
  EXPECT_EQ(reused, 0u);
  ASSERT_TRUE(f.cache->Append(b, tokens.size()).ok());
  f.cache->CacheBlocks(b, tokens);  // the same tokens under key 9: registered as well
  EXPECT_EQ(f.cache->FindPrefix(tokens, 9).blocks, 2u);
  EXPECT_EQ(f.cache->FindPrefix(tokens, 7).blocks, 2u);
  const SeqId c = f.cache->NewSequenceFromPrefix(tokens, &reused, 7);
  EXPECT_EQ(reused, 8u);
  EXPECT_EQ(f.cache->BlockTable(c), f.cache->BlockTable(a));
  // A sequence's key changes only while it is empty.
  EXPECT_FALSE(f.cache->SetPrefixKey(c, 9).ok());
  EXPECT_TRUE(f.cache->SetPrefixKey(c, 7).ok());
  const SeqId d = f.cache->NewSequence();
  EXPECT_TRUE(f.cache->SetPrefixKey(d, 9).ok());
}

TEST(KvPrefixCache, IdleBlocksAreEvictedLeastRecentlyReleasedFirst) {
  auto f = Make(4, 4, 64);
  const std::vector<int32_t> first = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> second = {9, 10, 11, 12, 13, 14, 15, 16};
  f.cache->FreeSequence(Computed(*f.cache, first));
  f.cache->FreeSequence(Computed(*f.cache, second));
  EXPECT_EQ(f.cache->cached_blocks(), 4u);
  EXPECT_EQ(f.cache->free_blocks(), 4u);
  // One more block evicts the leaf of the first sequence: its root still matches.
  const SeqId other = f.cache->NewSequence();
  ASSERT_TRUE(f.cache->Append(other, 1).ok());
  EXPECT_EQ(f.cache->FindPrefix(first).blocks, 1u);
  EXPECT_EQ(f.cache->FindPrefix(second).blocks, 2u);
  ASSERT_TRUE(f.cache->Append(other, 4).ok());  // a second block: the first sequence's root
  EXPECT_EQ(f.cache->FindPrefix(first).blocks, 0u);
  EXPECT_EQ(f.cache->FindPrefix(second).blocks, 2u);
  EXPECT_EQ(f.cache->cached_blocks(), 2u);
  // Only the second sequence's blocks are idle now: needing more than they fails and changes
  // nothing; needing them evicts them.
  const SeqId big = f.cache->NewSequence();
  EXPECT_FALSE(f.cache->Append(big, 9).ok());
  EXPECT_EQ(f.cache->FindPrefix(second).blocks, 2u);
  ASSERT_TRUE(f.cache->Append(big, 8).ok());
  EXPECT_EQ(f.cache->FindPrefix(second).blocks, 0u);
  EXPECT_EQ(f.cache->free_blocks(), 0u);
}

TEST(KvPrefixCache, BlocksInUseAreNeverEvictedAndRewrittenBlocksLeaveTheCache) {
  auto f = Make(3, 4, 64);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const SeqId a = Computed(*f.cache, tokens);
  EXPECT_EQ(f.cache->free_blocks(), 1u);
  const SeqId b = f.cache->NewSequence();
  EXPECT_FALSE(f.cache->Append(b, 5).ok());  // a's registered blocks are in use
  // Truncated into its second block and written again, a's block no longer holds those tokens.
  ASSERT_TRUE(f.cache->Truncate(a, 6).ok());
  ASSERT_TRUE(f.cache->Append(a, 2).ok());
  EXPECT_EQ(f.cache->FindPrefix(tokens).blocks, 1u);
  f.cache->CacheBlocks(a, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 0, 0});
  EXPECT_EQ(f.cache->FindPrefix(tokens).blocks, 1u);
  EXPECT_EQ(f.cache->FindPrefix(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 0, 0}).blocks, 2u);
  // Unknown tokens (negative ids) are never registered.
  const SeqId c = f.cache->NewSequence();
  ASSERT_TRUE(f.cache->Append(c, 4).ok());
  f.cache->CacheBlocks(c, std::vector<int32_t>{-1, 2, 3, 4});
  f.cache->FreeSequence(c);
  EXPECT_EQ(f.cache->cached_blocks(), 0u);
  // A fork shares registered blocks; the last user's release leaves them cached.
  auto child = f.cache->Fork(a);
  ASSERT_TRUE(child.ok());
  f.cache->FreeSequence(a);
  EXPECT_EQ(f.cache->cached_blocks(), 0u);
  f.cache->FreeSequence(*child);
  EXPECT_EQ(f.cache->cached_blocks(), 2u);
  EXPECT_EQ(f.cache->free_blocks(), 3u);
  EXPECT_EQ(f.cache->BlocksToAppend(b, 9), 3u);
}

TEST(KvCache, RejectsUnsupportedTypesAndSizes) {
  auto backend = std::move(CreateBackend("cpu", 0, {}).value());
  KvCacheOptions options;
  options.dtype = DType::kQ4_0;
  EXPECT_FALSE(KvCache::Create({backend.get()}, 8, options).ok());
  options.dtype = DType::kF16;
  options.block_tokens = 0;
  EXPECT_FALSE(KvCache::Create({backend.get()}, 8, options).ok());
}

}  // namespace
}  // namespace petrel
