// The public façade: load a model onto backends, manage sequences, decode batches to logits.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/model/loader.h"
#include "core/runtime/backend.h"
#include "core/runtime/backend_registry.h"  // Bf16Dot
#include "core/runtime/batch.h"
#include "core/runtime/engine_calls.h"
#include "core/runtime/executor.h"
#include "core/runtime/kv_cache.h"
#include "core/runtime/memory_plan.h"
#include "core/runtime/offload_options.h"
#include "core/runtime/pipeline_link.h"
#include "core/runtime/placement.h"

namespace petrel {

// `--gpu-layers` beyond a number: rules resolved at load, when the block count is known.
enum class GpuLayerRule {
  kCount,  // EngineOptions::device_layers blocks
  kAll,    // every block and the output head
  kHalf,   // the last n_layers / 2 blocks
  kAuto,   // as many of the last blocks as the device's free memory holds (DeviceMemoryPlan)
};

struct EngineOptions {
  size_t n_threads = 0;  // 0: all cores
  bool pin_threads = false;
  std::string device = "cpu";     // backend for offloaded layers: "ref", "vulkan", "vulkan:1"
  // --gpu-layers N: the last N blocks go to `device`, and the output head too when N exceeds
  // the block count. After load, the count the rule resolved to.
  size_t device_layers = 0;
  GpuLayerRule device_layer_rule = GpuLayerRule::kCount;
  // --tensor-split: with several devices in `device` ("vulkan:0,vulkan:1"), the offloaded
  // blocks are shared among them in consecutive ranges in these proportions (one positive
  // share per device; empty: equal shares). docs/OFFLOAD.md.
  std::vector<float> tensor_split;
  // -ot/--override-tensor: block weights (and the output head) placed by GGUF name on one of
  // the run's devices (the CPU, or a `device` entry); the first matching rule wins.
  std::vector<TensorRule> tensor_rules;
  // --cpu-moe (all blocks) / --n-cpu-moe N: the expert tensors of the first N blocks stay on
  // the CPU, while the rest of each block runs where --gpu-layers puts it. Rules come first.
  size_t cpu_moe_layers = 0;
  size_t context = 0;             // tokens per sequence (0: the model's, capped at 4096)
  size_t max_sequences = 1;       // KV blocks are sized for this many full sequences
  size_t kv_blocks = 0;           // KV blocks per layer; 0: max_sequences full contexts
  size_t max_batch_tokens = 512;  // longer prompts are split into chunks
  // Tokens per forward pass inside a batch; 0 chooses (ChooseMicroBatch). Activations, and so
  // peak memory, scale with it, while every pass reads each weight once (and widens F16/BF16
  // panels once), so longer passes run prompts faster on large models.
  size_t ubatch_tokens = 0;
  size_t kv_block_tokens = 16;
  DType kv_type = DType::kF32;
  bool touch_kv = false;  // KvCacheOptions::touch: the pool's pages made real at load
  bool load_tokenizer = true;
  MapOptions map;  // weight files: mapped (default) or read into memory, locked, load progress
  std::vector<LoraFile> lora;  // LoRA adapters added to every pass (LoraSet::AddToGraph)
  // Sequences may choose their own adapters and scales (SetSequenceLora), batched together.
  // Adapted layers then need per-row scales (scale_rows), so a device backend without them
  // leaves those layers on the CPU.
  bool lora_per_sequence = false;
  // BackendOptions::shared_prefix_attention (`serve --shared-prefix-attn`).
  bool shared_prefix_attention = true;
  // BackendOptions::bf16_dot (`--bf16-dot auto|on|off`).
  Bf16Dot bf16_dot = Bf16Dot::kBf16Weights;
  bool prequantized_as_f32 = false;  // LoadOptions::prequantized_as_f32
  std::function<void(ModelConfig&)> edit_config;  // LoadOptions::edit_config
  // Pipeline parallelism (docs/DISTRIBUTED.md): this process runs only the blocks the link
  // chooses (and the embedding or the output head when its range starts or ends the model),
  // keeps their KV storage only, and exchanges hidden rows through the link. Every process
  // makes the same engine calls; Decode returns the same logits on each. Null: the whole model.
  std::shared_ptr<PipelineLink> pipeline;
  // How the pipeline's processes agree on the engine calls. kEveryStage: each process makes
  // the same calls itself (run, perplexity, bench). kFirstStageLeads: the first stage makes
  // them (a server's scheduler), sends each call that changes the sequences or runs a pass to
  // the other stages, which replay them in FollowFirstStage (engine_calls.h says why that
  // keeps their KV caches the same), and alone receives the logits.
  enum class PipelineCalls { kEveryStage, kFirstStageLeads };
  PipelineCalls pipeline_calls = PipelineCalls::kEveryStage;
  // With kFirstStageLeads: a batch is cut into this many passes (of whole tokens, at least one
  // each) so that stage r + 1 runs one while stage r runs the next; 0: one per stage.
  size_t pipeline_micro_batches = 0;
};

// The longest pass, a power of two from 64 (or max_batch_tokens if shorter) up to
// max_batch_tokens, whose activations, arena_bytes(tokens), fit weight_bytes / share.
Result<size_t> PickMicroBatch(size_t weight_bytes, size_t share, size_t max_batch_tokens,
                              const std::function<Result<size_t>(size_t tokens)>& arena_bytes);

// One sequence's part of a Step: `tokens` continue `seq` in order.
struct StepInput {
  SeqId seq = -1;
  std::span<const int32_t> tokens;
  bool want_logits = false;  // the logits of its last token
};

// What became of one StepInput. On error the sequence is as it was before the step.
struct StepOutput {
  Status status;
  std::span<const float> logits;  // n_vocab floats with want_logits; valid until the next Step
};

class Engine {
 public:
  // Activations may take this fraction (1/n) of the weights' bytes when the engine chooses the
  // micro-batch size (EngineOptions::ubatch_tokens = 0).
  static constexpr size_t kActivationShare = 32;

  static Result<std::unique_ptr<Engine>> Load(const std::string& path,
                                              const EngineOptions& options);
  ~Engine();

  const ModelConfig& config() const { return model_->config; }
  const LoadedModel& model() const { return *model_; }
  const Tokenizer* tokenizer() const { return model_->tokenizer.get(); }
  const EngineOptions& options() const { return options_; }
  const Placement& placement() const { return placement_; }
  // The backends of the run: [0] is the CPU, then the devices in --device order.
  size_t n_backends() const { return backends_.size(); }
  const Backend& backend(BackendId b) const { return *backends_[size_t(b)]; }
  std::string PlacementString() const;
  // The weight views the graph's nodes point to (Node::weight), on their layer's backend.
  const ModelWeights& placed_weights() const { return placed_; }
  // Calls `observer` with the input of every matrix product from the next pass on; null stops.
  void SetMatMulObserver(MatMulObserver* observer) { executor_->SetMatMulObserver(observer); }
  // The blocks this process runs: every block without EngineOptions::pipeline.
  LayerRange stage_layers() const { return stage_; }
  // The bytes of the weights this process reads (its blocks, the embedding on the first stage
  // and the head on the last) and of its KV storage.
  size_t stage_weight_bytes() const { return stage_weight_bytes_; }
  size_t kv_bytes() const { return kv_->bytes(); }
  // The device memory plan the placement was made with; null without a device backend.
  const DeviceMemoryPlan* device_plan() const { return device_plan_ ? &*device_plan_ : nullptr; }

  // `--profile`: per-op device time of every backend, from the next batch on. TakeProfile
  // returns what was measured since the last call, by backend, and resets it.
  struct BackendProfile {
    std::string backend;
    std::vector<OpProfile> ops;
  };
  // `host`: the host backend (backend 0) too, timing each node it runs to its end (wall time,
  // so with devices it would count what it waits for): `petrel bench --profile` on the CPU.
  void EnableProfiling(bool enabled, bool host = false);
  std::vector<BackendProfile> TakeProfile();

  // Sequences: each holds the K/V rows of up to context() tokens in the paged cache. A new
  // sequence gets the adapters as loaded (EngineOptions::lora, each at its scale).
  SeqId NewSequence();
  void FreeSequence(SeqId seq);
  // A new sequence with the same tokens and adapters; it shares their K/V blocks until either
  // one writes.
  Result<SeqId> ForkSequence(SeqId seq);
  bool HasSequence(SeqId seq) const { return kv_->HasSequence(seq); }
  size_t SequenceLength(SeqId seq) const { return kv_->Length(seq); }  // tokens stored
  // Drops tokens past `length` (for example to re-run a turn).
  Status TruncateSequence(SeqId seq, size_t length);
  size_t context() const { return kv_->context(); }  // tokens per sequence at most
  // The paged cache's occupancy, in blocks of kv_block_tokens() tokens (a server admits
  // requests while blocks remain and reports them in its metrics).
  size_t kv_free_blocks() const { return kv_->free_blocks(); }
  size_t kv_total_blocks() const { return kv_->total_blocks(); }
  size_t kv_block_tokens() const { return kv_->block_tokens(); }
  // Blocks a Step feeding `n_new` more tokens to `seq` would take from the free ones.
  size_t KvBlocksToAppend(SeqId seq, size_t n_new) const { return kv_->BlocksToAppend(seq, n_new); }

  // LoRA adapters per sequence (EngineOptions::lora_per_sequence): `scales` has one entry per
  // loaded adapter (0: not applied); empty means the scales as loaded. Checked: the count,
  // finite scales, and a sequence that holds no tokens yet (its K/V would mix two sets).
  size_t n_lora() const { return options_.lora.size(); }
  Status CheckLoraScales(std::span<const float> scales) const;
  Status SetSequenceLora(SeqId seq, std::span<const float> scales);

  // Prefix caching (see KvCache): a new sequence over the longest cached prefix of `tokens`
  // (whole blocks) computed under the same adapters, and the registration of a sequence's full
  // blocks once computed. `lora_scales` as SetSequenceLora's, and checked first by the caller
  // (CheckLoraScales); the new sequence gets those adapters.
  KvPrefixMatch FindCachedPrefix(std::span<const int32_t> tokens,
                                 std::span<const float> lora_scales = {}) const {
    return kv_->FindPrefix(tokens, LoraKey(lora_scales));
  }
  SeqId NewSequenceFromCache(std::span<const int32_t> tokens, size_t* reused_tokens,
                             std::span<const float> lora_scales = {});
  void CacheSequenceBlocks(SeqId seq, std::span<const int32_t> tokens);
  size_t kv_cached_blocks() const { return kv_->cached_blocks(); }

  // A sequence's K/V rows, for session files: per layer, the K and the V rows of positions
  // [0, SequenceLength(seq)), kv_row_bytes() each, in the cache's type kv_type().
  size_t kv_layers() const { return kv_->n_layers(); }
  size_t kv_row_bytes() const { return kv_->row_bytes(); }
  bool kv_has_values() const { return kv_->has_values(); }  // false: K (latent) rows only
  DType kv_type() const { return kv_->dtype(); }
  // The same rows where they lie, when every layer's cache is in host memory (KvCache::HostRows).
  std::vector<std::span<const uint8_t>> HostSequenceKv(SeqId seq) const {
    return kv_->HostRows(seq);
  }
  Status ReadSequenceKv(SeqId seq, size_t layer, uint8_t* k_out, uint8_t* v_out) const {
    return kv_->ReadRows(seq, layer, k_out, v_out);
  }
  // Empties `seq` and gives it `length` positions whose rows the caller then writes, layer by
  // layer, with WriteSequenceKv. On error `seq` is left empty.
  // Neither is possible when the first stage leads (the rows of other stages' layers are not
  // here).
  Status ResizeSequenceKv(SeqId seq, size_t length) {
    if (leads()) return Error("session files cannot be read into a pipeline (--mpi)");
    PETREL_RETURN_IF_ERROR(kv_->Truncate(seq, 0));
    return kv_->Append(seq, length).status();
  }
  Status WriteSequenceKv(SeqId seq, size_t layer, const uint8_t* k_in, const uint8_t* v_in) {
    return kv_->WriteRows(seq, layer, k_in, v_in);
  }

  // Advances each input's sequence by its tokens in one forward pass, prompt chunks and
  // single-token decodes together. Each input is admitted on its own: its sequence must exist
  // and appear once, its ids lie in the vocabulary, and its tokens fit the context and the KV
  // blocks left by the inputs before it; one that does not gets its own error in `outputs` and
  // the others still run. `outputs` gets one entry per input. The returned status is an error
  // when the step as a whole failed: more than max_batch_tokens tokens in all, or a failed
  // forward pass (then every admitted input has that error too and no sequence changes).
  // Its own bookkeeping reuses engine scratch, so a steady step allocates no more than the
  // forward pass (Decode) does.
  Status Step(std::span<const StepInput> inputs, std::vector<StepOutput>* outputs);

  // Floats per wanted token that Decode returns: the vocabulary, or with Batch::hidden_output
  // the model dimension.
  size_t OutputWidth(bool hidden_output) const {
    return size_t(hidden_output ? model_->config.dim : model_->config.n_vocab);
  }

  // Runs one forward pass. Each sequence's tokens must continue it in order (positions =
  // its length, length + 1, …). `logits` receives n_vocab floats per token with want_logits,
  // in batch order. Runs in passes of ubatch_tokens. On error no sequence changes.
  Status Decode(const Batch& batch, std::vector<float>* logits);

  // Convenience: feeds `tokens` to `seq` in chunks of max_batch_tokens, returning the logits of
  // every position (all_logits) or of the last one only.
  Status Prefill(SeqId seq, const std::vector<int32_t>& tokens, bool all_logits,
                 std::vector<float>* logits);

  // With EngineOptions::pipeline_calls = kFirstStageLeads, on every stage but the first: replays
  // the first stage's calls as they arrive until it stops (StopFollowers). An error: the link
  // failed, or this stage's cache no longer matches the first stage's.
  Status FollowFirstStage();
  // On the first stage: tells the other stages to return from FollowFirstStage.
  Status StopFollowers();

 private:
  Engine() = default;
  // Whether this process is the first stage of a pipeline whose calls it leads.
  bool leads() const {
    return options_.pipeline &&
           options_.pipeline_calls == EngineOptions::PipelineCalls::kFirstStageLeads &&
           options_.pipeline->rank() == 0;
  }
  bool first_stage_leads() const {
    return options_.pipeline &&
           options_.pipeline_calls == EngineOptions::PipelineCalls::kFirstStageLeads;
  }
  // Whether this call is one the other stages must replay: the first stage leads and the call
  // is not made from inside another recorded call (Step's Decode). Counted by RecordScope.
  bool Records() const { return leads() && call_depth_ == 0; }
  struct RecordScope {
    explicit RecordScope(Engine* engine) : engine(engine) { ++engine->call_depth_; }
    ~RecordScope() { --engine->call_depth_; }
    Engine* engine;
  };
  // Sends the recorded calls to the other stages (before a pass, which needs them there).
  Status SendCalls();
  // Replays one call from `reader` (FollowFirstStage); `stop` is set by kStop.
  Status ReplayCall(CallReader& reader, bool* stop);
  // Decode when the first stage leads: passes of the batch's tokens in flight together.
  Status DecodePipelined(const Batch& batch, std::vector<float>* logits);
  // The default micro-batch: the largest power of two from 64 up to max_batch_tokens whose
  // activation arenas stay within 1/kActivationShare of the weights, so that peak memory stays
  // close to weights + KV cache on small models while large ones get long passes.
  Result<size_t> ChooseMicroBatch() const;
  // Bytes of the activation arenas of one pass of `tokens` tokens.
  Result<size_t> ArenaBytes(size_t tokens) const;
  // Fails, naming the larger part, when the KV cache and the arenas of one micro-batch cannot
  // fit the memory this process may still allocate, or the device's part of the plan
  // (device_plan_) cannot fit the device's free memory. Checked before anything is uploaded.
  Status CheckMemoryPlan(size_t kv_row_elems, const KvCacheOptions& kv) const;
  // Whether backend `b` keeps its memory apart from the host's (reports its free memory).
  bool HasDeviceMemory(BackendId b) const;
  // Fails, naming the rank, when this pipeline stage's weights, KV storage and activations
  // cannot fit the memory this process may still allocate.
  Status CheckStageMemory(const KvCacheOptions& kv) const;
  // Runs this pipeline stage's part of `pass`: receives the rows entering it, runs its nodes,
  // passes the rows leaving it on, and shares the last stage's output into `out`.
  Status RunStage(const Graph& pass, const BatchContext& context, bool share, float* out);
  // One forward pass; `first` is the index of batch[0] in the caller's batch (for messages).
  Status DecodeChunk(const Batch& batch, size_t first, std::vector<float>* logits);
  // The prefix-cache key of an adapter set (`scales` as SetSequenceLora's): 0 when no adapter
  // applies, else a hash of each applied adapter's index and scale.
  uint64_t LoraKey(std::span<const float> scales) const;
  // The adapters of this pass: per adapter, one scale for all rows or its row-scale vector
  // (lora_row_scales_), from each batch sequence's scales.
  void ChooseLoraApplications(size_t n_tokens);

  EngineOptions options_;
  std::unique_ptr<LoadedModel> model_;
  std::vector<std::unique_ptr<Backend>> backends_;  // [0] is the CPU backend
  Placement placement_;
  std::optional<DeviceMemoryPlan> device_plan_;
  ModelWeights placed_;  // weight views on their layer's backend
  std::unique_ptr<LoraSet> placed_lora_;  // the model's adapters on their layer's backend
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Executor> executor_;
  LayerRange stage_;                 // the blocks this process runs
  size_t stage_weight_bytes_ = 0;
  Graph stage_graph_;                // this stage's part of the current pass
  std::vector<ValueId> stage_value_map_;
  std::vector<float> stage_rows_in_, stage_rows_out_;  // (tokens, dim) entering / leaving
  // Per-batch scratch, kept so that decode steps of a steady shape allocate nothing.
  Graph graph_;
  Graph lora_graph_;  // graph_ with the adapters' nodes, when there are adapters
  std::map<SeqId, std::vector<float>> seq_lora_;  // sequences not on the loaded scales
  std::vector<LoraApplication> lora_applications_;  // per adapter, for the current pass
  std::vector<float> lora_row_scales_;  // (n_row_scales, n_tokens) of the current pass
  std::vector<SeqId> batch_seqs_;          // the batch's sequences, in order of first token
  std::vector<size_t> seq_start_;          // per batch sequence: its length before the batch
  std::vector<size_t> seq_tokens_;         // per batch sequence: its tokens in the batch
  std::vector<size_t> seq_appended_;       // per batch sequence: tokens appended to its KV so far
  std::vector<int32_t> seq_slots_;         // KV slots of each batch sequence's tokens, in order
  std::vector<int32_t> slot_begin_;        // per batch sequence: its first entry in seq_slots_
  std::vector<int32_t> token_seq_;         // per token: index into batch_seqs_
  std::vector<int32_t> block_tables_;      // the batch sequences' block tables, concatenated
  std::vector<int32_t> block_table_begin_; // (batch sequences + 1)
  std::vector<int32_t> n_ctx_, n_ctx_all_, kv_slot_, selected_;
  std::vector<float> unwanted_logits_;     // the output row of a batch that wants no logits
  Batch part_;                             // one pass of a batch split into passes
  std::vector<float> part_logits_;
  std::vector<std::pair<SeqId, size_t>> lengths_before_;  // Decode's rollback points
  // Step scratch (engine_step.cc), kept so that steady decoding allocates nothing more.
  Batch step_batch_;
  std::vector<float> step_logits_;
  std::vector<size_t> step_admitted_;  // indices of the admitted inputs, in input order
  std::vector<uint8_t> step_taken_;    // per input: its blocks were taken to test the fit
  // Pipeline calls (engine_calls.cc).
  CallWriter calls_;                              // recorded since the last SendCalls
  int call_depth_ = 0;                            // recorded calls being made now (RecordScope)
  std::vector<uint8_t> calls_in_;                 // a follower's last message
  std::vector<std::vector<float>> pass_outputs_;  // DecodePipelined: each pass's output
  // A follower's replayed Step: its inputs own their tokens.
  std::vector<std::vector<int32_t>> replay_tokens_;
  std::vector<StepInput> replay_inputs_;
  std::vector<StepOutput> replay_outputs_;
  Batch replay_batch_;
  std::vector<float> replay_logits_;
};

}  // namespace petrel
