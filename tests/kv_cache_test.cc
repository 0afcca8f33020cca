// Paged KV cache bookkeeping: block tables, slots, exhaustion, fork with copy-on-write, truncate.
#include <gtest/gtest.h>

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
