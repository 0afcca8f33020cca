// Embed: packs whole sequences into batches, asks the engine for their final hidden states and
// pools each sequence's rows.
#include "core/generation/embedding.h"

#include <algorithm>
#include <cmath>

#include "core/runtime/engine.h"

namespace petrel {

void NormalizeEmbedding(std::span<float> v, int normalize) {
  if (normalize < 0) return;
  double sum = 0.0;
  if (normalize == 0) {  // the largest magnitude maps to int16's range
    for (float x : v) sum = std::max(sum, double(std::fabs(x)));
    sum /= 32760.0;
  } else if (normalize == 1) {
    for (float x : v) sum += std::fabs(x);
  } else if (normalize == 2) {
    for (float x : v) sum += double(x) * double(x);
    sum = std::sqrt(sum);
  } else {
    for (float x : v) sum += std::pow(std::fabs(double(x)), double(normalize));
    sum = std::pow(sum, 1.0 / double(normalize));
  }
  const double scale = sum > 0.0 ? 1.0 / sum : 0.0;
  for (float& x : v) x = float(double(x) * scale);
}

namespace {

// One sequence's hidden-state rows, pooled into `out` (dim floats), or all of them kept.
void Pool(PoolingKind pooling, const float* rows, size_t n_rows, size_t dim,
          std::vector<float>* out) {
  switch (pooling) {
    case PoolingKind::kNone:
      out->assign(rows, rows + n_rows * dim);
      return;
    case PoolingKind::kCls:
      out->assign(rows, rows + dim);
      return;
    case PoolingKind::kLast:
      out->assign(rows + (n_rows - 1) * dim, rows + n_rows * dim);
      return;
    case PoolingKind::kUnset:  // resolved before
    case PoolingKind::kMean: {
      std::vector<double> sum(dim, 0.0);
      for (size_t r = 0; r < n_rows; ++r) {
        for (size_t i = 0; i < dim; ++i) sum[i] += rows[r * dim + i];
      }
      out->resize(dim);
      for (size_t i = 0; i < dim; ++i) (*out)[i] = float(sum[i] / double(n_rows));
      return;
    }
  }
}

// Which of a sequence's rows the pooling reads.
bool Wanted(PoolingKind pooling, size_t index, size_t length) {
  switch (pooling) {
    case PoolingKind::kCls:
      return index == 0;
    case PoolingKind::kLast:
      return index + 1 == length;
    case PoolingKind::kUnset:
    case PoolingKind::kNone:
    case PoolingKind::kMean:
      return true;
  }
  return true;
}

size_t WantedRows(PoolingKind pooling, size_t length) {
  return pooling == PoolingKind::kCls || pooling == PoolingKind::kLast ? 1 : length;
}

}  // namespace

Result<Embeddings> Embed(Engine& engine, std::span<const std::vector<int32_t>> inputs,
                         const EmbedOptions& options) {
  const ModelConfig& config = engine.config();
  const PoolingKind pooling =
      options.pooling == PoolingKind::kUnset ? config.DefaultPooling() : options.pooling;
  const size_t max_batch = engine.options().max_batch_tokens;
  const size_t pass_tokens = engine.options().ubatch_tokens;
  const bool whole_pass = !config.causal_attention;
  Embeddings result;
  result.dim = engine.OutputWidth(true);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t>& ids = inputs[i];
    if (ids.empty()) return Error("input %zu is empty", i);
    for (size_t t = 0; t < ids.size(); ++t) {
      if (ids[t] < 0 || ids[t] >= config.n_vocab) {
        return Error("input %zu: token %zu (id %d) is outside the vocabulary of %lld", i, t, ids[t],
                     (long long)config.n_vocab);
      }
    }
    if (ids.size() > engine.context()) {
      return Error("input %zu has %zu tokens, more than the context of %zu", i, ids.size(),
                   engine.context());
    }
    if (whole_pass && ids.size() > std::min(max_batch, pass_tokens)) {
      return Error("input %zu has %zu tokens, more than one pass of %zu (raise --batch-size)", i,
                   ids.size(), std::min(max_batch, pass_tokens));
    }
    result.tokens += ids.size();
  }
  result.vectors.resize(inputs.size());

  // Batches of whole sequences while they fit the batch, the pass (encoders) and the KV
  // blocks; a sequence longer than a batch (causal models only) goes alone in chunks.
  const size_t batch_limit = whole_pass ? std::min(max_batch, pass_tokens) : max_batch;
  Batch batch;
  batch.hidden_output = true;
  std::vector<float> hidden;
  std::vector<SeqId> seqs;      // the batch's sequences
  std::vector<size_t> members;  // their input indices
  auto free_seqs = [&] {
    for (SeqId seq : seqs) engine.FreeSequence(seq);
    seqs.clear();
    members.clear();
    batch.Clear();
    batch.hidden_output = true;
  };
  auto run = [&]() -> Status {
    if (batch.size() == 0) return Status::Ok();
    Status status = engine.Decode(batch, &hidden);
    if (!status.ok()) {
      free_seqs();
      return status;
    }
    size_t row = 0;
    for (size_t m = 0; m < members.size(); ++m) {
      const std::vector<int32_t>& ids = inputs[members[m]];
      const size_t n_rows = WantedRows(pooling, ids.size());
      std::vector<float>& out = result.vectors[members[m]];
      Pool(pooling, hidden.data() + row * result.dim, n_rows, result.dim, &out);
      row += n_rows;
      // Pooling none: each token's row is normalised on its own.
      for (size_t r = 0; r < out.size() / result.dim; ++r) {
        NormalizeEmbedding(std::span<float>(out.data() + r * result.dim, result.dim),
                           options.normalize);
      }
    }
    free_seqs();
    return Status::Ok();
  };
  const size_t block_tokens = engine.kv_block_tokens();
  size_t blocks_taken = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t>& ids = inputs[i];
    const size_t blocks = (ids.size() + block_tokens - 1) / block_tokens;
    if (batch.size() + ids.size() > batch_limit ||
        blocks_taken + blocks > engine.kv_free_blocks()) {
      PETREL_RETURN_IF_ERROR(run());
      blocks_taken = 0;
    }
    if (blocks > engine.kv_free_blocks()) {
      return Error("input %zu: its %zu tokens need more KV blocks than are free", i, ids.size());
    }
    const SeqId seq = engine.NewSequence();
    if (ids.size() > batch_limit) {
      // A causal model's long input: chunks continue the sequence; the last one's rows (and,
      // for mean or none, every chunk's) are kept.
      std::vector<float> rows;
      for (size_t begin = 0; begin < ids.size(); begin += batch_limit) {
        const size_t end = std::min(ids.size(), begin + batch_limit);
        batch.Clear();
        batch.hidden_output = true;
        for (size_t t = begin; t < end; ++t) {
          batch.Add(ids[t], int32_t(t), seq, Wanted(pooling, t, ids.size()));
        }
        Status status = engine.Decode(batch, &hidden);
        if (!status.ok()) {
          engine.FreeSequence(seq);
          return status;
        }
        rows.insert(rows.end(), hidden.begin(), hidden.end());
      }
      engine.FreeSequence(seq);
      batch.Clear();
      batch.hidden_output = true;
      std::vector<float>& out = result.vectors[i];
      Pool(pooling, rows.data(), rows.size() / result.dim, result.dim, &out);
      for (size_t r = 0; r < out.size() / result.dim; ++r) {
        NormalizeEmbedding(std::span<float>(out.data() + r * result.dim, result.dim),
                           options.normalize);
      }
      continue;
    }
    seqs.push_back(seq);
    members.push_back(i);
    blocks_taken += blocks;
    for (size_t t = 0; t < ids.size(); ++t) {
      batch.Add(ids[t], int32_t(t), seq, Wanted(pooling, t, ids.size()));
    }
  }
  PETREL_RETURN_IF_ERROR(run());
  return result;
}

}  // namespace petrel
