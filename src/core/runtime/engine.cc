// Engine: placement of weights and KV storage on backends, and the per-batch bookkeeping
// (positions, KV slots, RoPE tables) that turns a Batch into a graph run.
#include "core/runtime/engine.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <unordered_set>

#include "core/runtime/backend_registry.h"
#include "core/runtime/pipeline_stage.h"  // CutStage
#include "core/runtime/weight_placement.h"
#include "core/tokenizer/tokenizer.h"

namespace petrel {

Engine::~Engine() = default;

namespace {

Result<TensorView> Place(Backend& backend, const TensorView& view) {
  if (!view.data) return view;
  return backend.PrepareWeight(view);
}

// A "kB" field of a /proc file (MemAvailable in /proc/meminfo, VmSize in /proc/self/status),
// in bytes; 0 when absent.
size_t ProcKbField(const char* path, const char* field) {
  std::ifstream in(path);
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return size_t(std::strtoull(line.c_str() + n + 1, nullptr, 10)) * 1024;
    }
  }
  return 0;
}

// Bytes this process can still allocate: the kernel's MemAvailable (free pages on other
// systems), lowered by an address-space limit (ulimit -v) less what is already mapped.
size_t AvailableMemory() {
  size_t available = ProcKbField("/proc/meminfo", "MemAvailable");
  if (available == 0) {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) available = size_t(pages) * size_t(page);
  }
  struct rlimit limit;
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const size_t used = ProcKbField("/proc/self/status", "VmSize");
    const size_t room = size_t(limit.rlim_cur) > used ? size_t(limit.rlim_cur) - used : 0;
    available = available == 0 ? room : std::min(available, room);
  }
  return available;
}

double GiB(size_t bytes) { return double(bytes) / double(size_t(1) << 30); }

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Load(const std::string& path,
                                             const EngineOptions& options) {
  std::unique_ptr<Engine> engine(new Engine());
  engine->options_ = options;
  EngineOptions& opts = engine->options_;
  if (opts.n_threads == 0) opts.n_threads = std::max(1u, std::thread::hardware_concurrency());
  if (opts.max_batch_tokens == 0) return Error("batch size must be positive");
  BackendOptions backend_options{opts.n_threads, opts.pin_threads, -1,
                                 opts.shared_prefix_attention, opts.bf16_dot};
  PETREL_ASSIGN_OR_RETURN(auto cpu, CreateBackend("cpu", 0, backend_options));
  engine->backends_.push_back(std::move(cpu));
  // The devices are opened even when no block will go there, so that a wrong --device is an
  // error rather than silently ignored; those that get nothing are dropped below. A "cpu"
  // entry of a device list is backend 0.
  std::vector<BackendId> device_ids;
  std::vector<DeviceSpec> specs{DeviceSpec{"cpu", -1}};  // per backend
  for (const std::string& name : SplitDeviceList(opts.device)) {
    PETREL_ASSIGN_OR_RETURN(const DeviceSpec spec, ParseDeviceSpec(name));
    if (spec.backend == "cpu") {
      device_ids.push_back(0);
      continue;
    }
    const BackendId id = BackendId(engine->backends_.size());
    PETREL_ASSIGN_OR_RETURN(auto extra, CreateBackend(name, id, backend_options));
    engine->backends_.push_back(std::move(extra));
    specs.push_back(spec);
    device_ids.push_back(id);
  }
  const bool wants_device = engine->backends_.size() > 1;
  std::vector<float> shares = opts.tensor_split;
  if (shares.empty()) shares.assign(device_ids.size(), 1.0f);
  if (shares.size() != device_ids.size()) {
    return Error("--tensor-split has %zu shares for %zu device%s (--device %s)", shares.size(),
                 device_ids.size(), device_ids.size() == 1 ? "" : "s", opts.device.c_str());
  }
  for (float share : shares) {
    if (!(share > 0.0f)) return Error("--tensor-split: every share must be positive");
  }
  if (device_ids.size() > 1 && opts.device_layer_rule == GpuLayerRule::kAuto) {
    return Error("--gpu-layers auto fits one device; give a count or all with --tensor-split");
  }
  // Each -ot rule's device is one of this run's backends.
  std::vector<PlacedRule> rules;
  for (const TensorRule& rule : opts.tensor_rules) {
    PETREL_ASSIGN_OR_RETURN(const DeviceSpec want, ParseDeviceSpec(rule.device));
    BackendId found = -1;
    for (size_t b = 0; b < specs.size() && found < 0; ++b) {
      // A device opened without an index ("--device vulkan", the best one) answers to any
      // index the backend has.
      bool same_index = want.index < 0 || want.index == specs[b].index;
      if (!same_index && specs[b].index < 0) {
        const BackendFactory* factory = FindBackend(want.backend);
        auto listed =
            factory && factory->list_devices
                ? factory->list_devices()
                : Result<std::vector<DeviceDescription>>(std::vector<DeviceDescription>{});
        same_index = listed.ok() && size_t(want.index) < listed->size();
      }
      if (specs[b].backend == want.backend && same_index) found = BackendId(b);
    }
    if (found < 0) {
      std::string have = "cpu";
      for (size_t b = 1; b < specs.size(); ++b)
        have += ", " + std::string(engine->backends_[b]->Name());
      return Error(
          "tensor override '%s': %s is not a device of this run (it has %s; add it to "
          "--device)",
          rule.text.c_str(), rule.device.c_str(), have.c_str());
    }
    rules.push_back({&rule, found});
  }
  LoadOptions load_options;
  load_options.load_tokenizer = opts.load_tokenizer;
  load_options.map = opts.map;
  load_options.lora = opts.lora;
  load_options.prequantized_as_f32 = opts.prequantized_as_f32;
  load_options.edit_config = opts.edit_config;
  PETREL_ASSIGN_OR_RETURN(engine->model_, LoadModel(path, load_options));
  const ModelConfig& config = engine->model_->config;
  const size_t n_layers = size_t(config.n_layers);
  engine->stage_ = {0, int(n_layers)};
  if (opts.pipeline) {
    PETREL_ASSIGN_OR_RETURN(engine->stage_, opts.pipeline->ChooseLayers(*engine->model_));
    if (opts.lora.size() > 0) return Error("--lora is not supported with --mpi yet");
  }
  const LayerRange stage = engine->stage_;
  const bool first_stage = stage.begin == 0, last_stage = stage.end == int(n_layers);
  {
    const ModelWeightBytes bytes = WeightBytesOf(*engine->model_);
    for (int l = stage.begin; l < stage.end; ++l) engine->stage_weight_bytes_ += bytes.blocks[size_t(l)];
    if (first_stage) engine->stage_weight_bytes_ += bytes.embedding;
    if (last_stage) engine->stage_weight_bytes_ += bytes.head;
  }

  // A cache head is a latent row with latent attention.
  const int64_t kv_head = config.mla() ? config.kv_row_elems() : config.head_dim;
  if (!RowBytes(opts.kv_type, uint64_t(kv_head))) {
    return Error(
        "KV cache type %s needs heads of whole %u-element blocks; this model's heads have %lld",
        DTypeName(opts.kv_type), Traits(opts.kv_type).block_elems, (long long)kv_head);
  }
  KvCacheOptions kv_options;
  kv_options.block_tokens = opts.kv_block_tokens;
  kv_options.dtype = opts.kv_type;
  kv_options.values = config.kv_has_values();
  kv_options.touch = opts.touch_kv;
  size_t context =
      opts.context
          ? opts.context
          : size_t(std::min<int64_t>(config.max_context > 0 ? config.max_context : 4096, 4096));
  if (config.n_positions > 0 && context > size_t(config.n_positions)) {
    return Error("context of %zu tokens exceeds the model's %lld learned positions", context,
                 (long long)config.n_positions);
  }
  kv_options.context = context;
  UseRopeContext(int64_t(context), engine->model_.get());  // LongRoPE's table for this context
  const size_t blocks_per_seq =
      (context + opts.kv_block_tokens - 1) / std::max<size_t>(1, opts.kv_block_tokens);
  kv_options.n_blocks =
      opts.kv_blocks ? opts.kv_blocks : blocks_per_seq * std::max<size_t>(1, opts.max_sequences);

  // --gpu-layers resolved to a count; `auto` starts from everything and is fitted below.
  size_t device_layers = 0;
  if (wants_device) {
    switch (opts.device_layer_rule) {
      case GpuLayerRule::kCount: device_layers = opts.device_layers; break;
      case GpuLayerRule::kAll: device_layers = n_layers + 1; break;
      case GpuLayerRule::kHalf: device_layers = n_layers / 2; break;
      case GpuLayerRule::kAuto: device_layers = n_layers + 1; break;
    }
  }
  engine->placement_ = Placement::Split(n_layers, device_ids, shares, device_layers);
  if (opts.ubatch_tokens == 0) {
    // Bidirectional attention needs each sequence in one pass, so passes are as long as
    // batches (encoders are small).
    if (!config.causal_attention) {
      opts.ubatch_tokens = opts.max_batch_tokens;
    } else {
      PETREL_ASSIGN_OR_RETURN(opts.ubatch_tokens, engine->ChooseMicroBatch());
    }
  }
  if (wants_device) {
    PETREL_ASSIGN_OR_RETURN(DeviceMemoryPlan plan,
                            PlanDeviceMemory(*engine->model_, kv_options, opts.ubatch_tokens));
    if (opts.device_layer_rule == GpuLayerRule::kAuto && engine->HasDeviceMemory(1)) {
      device_layers = plan.FitLayers(engine->backends_[1]->FreeMemory());
      engine->placement_ = Placement::Split(n_layers, device_ids, shares, device_layers);
    }
    engine->device_plan_ = std::move(plan);
  }
  PETREL_RETURN_IF_ERROR(
      PlaceWeightsByRule(engine->model_->weights, rules, opts.cpu_moe_layers, &engine->placement_));
  // Devices that got nothing (no block, no weight, not the head) are dropped: with none left,
  // the run is the CPU's alone.
  {
    const Placement& p = engine->placement_;
    bool used = p.output != 0;
    for (BackendId b : p.layers) used = used || b != 0;
    for (const auto& layer : p.weights) {
      for (BackendId b : layer) used = used || b > 0;
    }
    if (wants_device && !used) {
      engine->backends_.resize(1);
      engine->device_plan_.reset();
    }
  }
  opts.device_layers = device_layers;
  // The block weights some node reads. Phi-3's fused qkv and gate_up tensors are read only
  // through their parts, so a device gets the parts and never the whole a second time.
  std::unordered_set<const TensorView*> read_by_nodes;
  {
    Graph probe;
    engine->model_->arch->build_graph(config, engine->model_->weights, 1, 1, &probe);
    if (const LoraSet* lora = engine->model_->lora.get()) {
      // Every node a pass may add: per-row scales when sequences choose their adapters.
      const std::vector<LoraApplication> applications =
          opts.lora_per_sequence ? lora->PerRowApplications() : lora->DefaultApplications();
      Graph adapted;
      lora->AddToGraph(engine->model_->weights, probe, applications, &adapted);
      probe = std::move(adapted);
    }
    PETREL_RETURN_IF_ERROR(PlaceSupportedNodes(probe, engine->model_->weights, engine->backends_,
                                               &engine->placement_));
    for (const Node& node : probe.nodes) read_by_nodes.insert({node.weight, node.weight_up, node.weight_down, node.bias});
  }
  const Placement& placement = engine->placement_;
  // A pipeline stage checks its own part: its blocks' weights and KV storage.
  PETREL_RETURN_IF_ERROR(opts.pipeline
                             ? engine->CheckStageMemory(kv_options)
                             : engine->CheckMemoryPlan(size_t(config.kv_row_elems()), kv_options));

  // Weight views on their backends (host backends keep pointing into the mapped file). A
  // device that runs out of memory despite the plan names the part it could not take.
  const bool has_device = engine->backends_.size() > 1 && engine->HasDeviceMemory(1);
  auto place = [&](BackendId b, const TensorView& view, const std::string& where) -> Result<TensorView> {
    Backend& backend = *engine->backends_[size_t(b)];
    Result<TensorView> placed = Place(backend, view);
    if (placed.ok() || b == 0) return placed;
    return Error("%s on %s: %s%s", where.c_str(), backend.Name(), placed.status().message().c_str(),
                 has_device ? "; try a smaller --gpu-layers" : "");
  };
  const ModelWeights& host = engine->model_->weights;
  ModelWeights& placed = engine->placed_;
  // Another pipeline stage's weights keep their host views, which no node of this stage reads,
  // so their pages are never touched here.
  auto place_if = [&](bool held, BackendId b, const TensorView& view,
                      const std::string& where) -> Result<TensorView> {
    if (!held) return view;
    return place(b, view, where);
  };
  PETREL_ASSIGN_OR_RETURN(placed.token_embd,
                          place_if(first_stage, placement.embedding, host.token_embd, "embedding"));
  PETREL_ASSIGN_OR_RETURN(placed.output,
                          place_if(last_stage, placement.output, host.output, "output head"));
  PETREL_ASSIGN_OR_RETURN(placed.output_norm,
                          place_if(last_stage, placement.output, host.output_norm, "output head"));
  placed.input = LayerWeights(host.input.specs());
  for (size_t i = 0; i < host.input.size(); ++i) {
    PETREL_ASSIGN_OR_RETURN(placed.input[i],
                            place_if(first_stage, placement.embedding, host.input[i], "embedding"));
  }
  placed.rope_inv_freq = host.rope_inv_freq;
  placed.rope_inv_freq_local = host.rope_inv_freq_local;
  placed.layers.resize(host.layers.size());
  std::vector<Backend*> layer_backends;
  for (size_t l = 0; l < host.layers.size(); ++l) {
    const bool held = stage.Holds(int(l));
    layer_backends.push_back(held ? engine->backends_[size_t(placement.layers[l])].get() : nullptr);
    const LayerWeights& h = host.layers[l];
    LayerWeights& p = placed.layers[l];
    p = LayerWeights(h.specs());
    for (size_t i = 0; i < h.size(); ++i) {
      if (!held || !read_by_nodes.count(&h[i])) {
        p[i] = h[i];  // no node reads it: it stays in host memory only
        continue;
      }
      PETREL_ASSIGN_OR_RETURN(p[i],
                              place(placement.OfWeight(l, i), h[i], "layer " + std::to_string(l)));
    }
  }
  if (const LoraSet* lora = engine->model_->lora.get()) {
    // The adapters' matrices go where the layer they update runs.
    PETREL_ASSIGN_OR_RETURN(
        engine->placed_lora_,
        lora->Placed([&](int layer, const TensorView& view) -> Result<TensorView> {
          const bool output = size_t(layer) >= placement.layers.size();
          return place(output ? placement.output : placement.layers[size_t(layer)], view,
                       output ? "output head" : "layer " + std::to_string(layer));
        }));
  }

  auto kv = KvCache::Create(layer_backends, size_t(config.kv_row_elems()), kv_options);
  if (!kv.ok()) {
    if (!has_device) return kv.status();
    return ErrorMessage(kv.status().message() + "; try a smaller --gpu-layers or -c");
  }
  engine->kv_ = std::move(kv).value();

  std::vector<Backend*> raw;
  for (auto& backend : engine->backends_) raw.push_back(backend.get());
  engine->executor_ = std::make_unique<Executor>(raw, placement, &engine->placed_);
  return engine;
}

Result<size_t> PickMicroBatch(size_t weight_bytes, size_t share, size_t max_batch_tokens,
                              const std::function<Result<size_t>(size_t tokens)>& arena_bytes) {
  const size_t budget = weight_bytes / std::max<size_t>(share, 1);
  size_t chosen = std::min<size_t>(64, max_batch_tokens);
  for (size_t tokens = 2 * chosen; tokens <= max_batch_tokens; tokens *= 2) {
    PETREL_ASSIGN_OR_RETURN(const size_t bytes, arena_bytes(tokens));
    if (bytes > budget) break;
    chosen = tokens;
  }
  return chosen;
}

Result<size_t> Engine::ArenaBytes(size_t tokens) const {
  PETREL_ASSIGN_OR_RETURN(const std::vector<size_t> bytes,
                          ArenaBytesPerBackend(*model_, placement_, backends_.size(), tokens));
  size_t total = 0;
  for (size_t b : bytes) total += b;
  return total;
}

bool Engine::HasDeviceMemory(BackendId b) const {
  return b != 0 && size_t(b) < backends_.size() && backends_[size_t(b)]->FreeMemory() > 0;
}

Status Engine::CheckMemoryPlan(size_t kv_row_elems, const KvCacheOptions& kv) const {
  // Checked before anything large is allocated or uploaded, so that a plan that cannot fit is
  // one clear error instead of an allocation failure (or the OOM killer) after a long load.
  // Host memory: the KV storage of the layers on host backends and their arenas.
  const size_t kv_layer_bytes =
      kv.n_blocks * kv.block_tokens * size_t(*RowBytes(kv.dtype, kv_row_elems)) * (kv.values ? 2 : 1);
  size_t host_layers = 0;
  for (const BackendId b : placement_.layers) host_layers += HasDeviceMemory(b) ? 0 : 1;
  const size_t kv_bytes = kv_layer_bytes * host_layers;
  PETREL_ASSIGN_OR_RETURN(
      const std::vector<size_t> arenas,
      ArenaBytesPerBackend(*model_, placement_, backends_.size(), options_.ubatch_tokens));
  size_t arena_bytes = 0;
  for (size_t b = 0; b < arenas.size(); ++b) arena_bytes += HasDeviceMemory(BackendId(b)) ? 0 : arenas[b];
  // Weights converted or read in at load are already resident, so the available memory below
  // has accounted for them; mapped weights are page cache, which MemAvailable counts as free.
  const size_t available = AvailableMemory();
  const size_t total = kv_bytes + arena_bytes;
  const size_t sequences = std::max<size_t>(1, options_.max_sequences);
  if (available != 0 && total > available) {
    if (kv_bytes >= arena_bytes) {
      return Error(
          "the KV cache for %zu tokens x %zu sequences (%.1f GiB, %s) and %.1f GiB of "
          "activations do not fit the %.1f GiB of available memory; lower -c",
          kv.context, sequences, GiB(kv_bytes), DTypeName(kv.dtype), GiB(arena_bytes),
          GiB(available));
    }
    return Error(
        "the activations for passes of %zu tokens (%.1f GiB) and a %.1f GiB KV cache do not fit "
        "the %.1f GiB of available memory; lower --ubatch-size",
        options_.ubatch_tokens, GiB(arena_bytes), GiB(kv_bytes), GiB(available));
  }
  // Device memory: the plan's part for the blocks and weights that ended up on each device.
  if (!device_plan_) return Status::Ok();
  const DeviceMemoryPlan& plan = *device_plan_;
  for (size_t d = 1; d < backends_.size(); ++d) {
    const BackendId device = BackendId(d);
    if (!HasDeviceMemory(device)) continue;
    const size_t need = plan.DeviceBytes(placement_, device);
    const size_t free = backends_[d]->FreeMemory();
    if (need <= free) continue;
    size_t layers = 0;
    for (const BackendId b : placement_.layers) layers += b == device ? 1 : 0;
    return Error(
        "%zu blocks%s on %s need %.2f GiB (weights %.2f, KV cache %.2f, activations %.2f) but the "
        "device has %.2f GiB free; use a smaller --gpu-layers (auto would place %zu)",
        layers, placement_.output == device ? " and the output head" : "", backends_[d]->Name(),
        GiB(need), GiB(plan.DeviceWeightBytes(placement_, device)),
        GiB(plan.LayerKvBytes() * layers), GiB(plan.activation_bytes), GiB(free),
        std::min(plan.FitLayers(free), plan.n_layers()));
  }
  return Status::Ok();
}

Result<size_t> Engine::ChooseMicroBatch() const {
  return DefaultMicroBatch(*model_, placement_, backends_.size(), options_.max_batch_tokens);
}

void Engine::EnableProfiling(bool enabled, bool host) {
  for (size_t b = 0; b < backends_.size(); ++b) {
    backends_[b]->EnableProfiling(enabled && (b > 0 || host));
  }
}

std::vector<Engine::BackendProfile> Engine::TakeProfile() {
  std::vector<BackendProfile> profiles;
  for (auto& backend : backends_) {
    BackendProfile profile;
    profile.backend = backend->Name();
    profile.ops = backend->TakeProfile();
    if (!profile.ops.empty()) profiles.push_back(std::move(profile));
  }
  return profiles;
}

std::string Engine::PlacementString() const {
  // Two devices of one backend (a split over vulkan:0 and vulkan:1) are told apart by number.
  std::vector<std::string> names;
  for (size_t b = 0; b < backends_.size(); ++b) {
    size_t same = 0;
    for (const auto& other : backends_) same += std::string(other->Name()) == backends_[b]->Name();
    names.push_back(backends_[b]->Name() + (same > 1 ? "#" + std::to_string(b) : std::string()));
  }
  const std::string apart = placement_.DescribeWeights(names, model_->weights);
  return placement_.Describe(names) + (apart.empty() ? "" : "; " + apart);
}

Status Engine::Decode(const Batch& batch, std::vector<float>* logits) {
  if (batch.size() > options_.max_batch_tokens) {
    return Error("batch of %zu tokens exceeds the maximum of %zu", batch.size(),
                 options_.max_batch_tokens);
  }
  if (first_stage_leads()) {
    if (Records()) {
      calls_.Call(EngineCall::kDecode);
      calls_.Array<int32_t>(batch.tokens);
      calls_.Array<int32_t>(batch.positions);
      calls_.Array<SeqId>(batch.seq_ids);
      calls_.Array<uint8_t>(batch.want_logits);
      calls_.Int(batch.hidden_output ? 1 : 0);
      PETREL_RETURN_IF_ERROR(SendCalls());
    }
    RecordScope scope(this);
    return DecodePipelined(batch, logits);
  }
  const size_t ubatch = options_.ubatch_tokens;
  if (batch.size() <= ubatch) return DecodeChunk(batch, 0, logits);
  if (batch.positions.size() != batch.size() || batch.seq_ids.size() != batch.size() ||
      batch.want_logits.size() != batch.size()) {
    return Error("batch arrays have different lengths");
  }
  // Several passes: a later one that fails undoes the earlier ones' KV appends.
  lengths_before_.clear();
  for (SeqId seq : batch.seq_ids) {
    if (!kv_->HasSequence(seq)) continue;
    bool seen = false;
    for (const auto& [known, length] : lengths_before_) seen = seen || known == seq;
    if (!seen) lengths_before_.emplace_back(seq, kv_->Length(seq));
  }
  if (logits) logits->clear();
  for (size_t begin = 0; begin < batch.size(); begin += ubatch) {
    const size_t end = std::min(batch.size(), begin + ubatch);
    part_.Clear();
    part_.hidden_output = batch.hidden_output;
    for (size_t t = begin; t < end; ++t) {
      part_.Add(batch.tokens[t], batch.positions[t], batch.seq_ids[t], batch.want_logits[t] != 0);
    }
    Status status = DecodeChunk(part_, begin, &part_logits_);
    if (!status.ok()) {
      for (const auto& [seq, length] : lengths_before_) (void)kv_->Truncate(seq, length);
      return status;
    }
    if (logits) logits->insert(logits->end(), part_logits_.begin(), part_logits_.end());
  }
  return Status::Ok();
}

Status Engine::DecodeChunk(const Batch& batch, size_t first, std::vector<float>* logits) {
  const ModelConfig& config = model_->config;
  const size_t n = batch.size();
  if (n == 0) return Error("empty batch");
  if (batch.positions.size() != n || batch.seq_ids.size() != n || batch.want_logits.size() != n) {
    return Error("batch arrays have different lengths");
  }
  // Validate and group tokens by sequence, in order of first appearance. Batches hold few
  // sequences, so a linear search per token is cheaper than a map and allocates nothing.
  batch_seqs_.clear();
  seq_start_.clear();
  seq_tokens_.clear();
  token_seq_.resize(n);
  for (size_t t = 0; t < n; ++t) {
    const SeqId seq = batch.seq_ids[t];
    if (batch.tokens[t] < 0 || batch.tokens[t] >= config.n_vocab) {
      return Error("token %zu: id %d is outside the vocabulary of %lld", first + t, batch.tokens[t],
                   (long long)config.n_vocab);
    }
    size_t s = 0;
    while (s < batch_seqs_.size() && batch_seqs_[s] != seq) ++s;
    if (s == batch_seqs_.size()) {
      if (!kv_->HasSequence(seq))
        return Error("token %zu: sequence %d does not exist", first + t, seq);
      batch_seqs_.push_back(seq);
      seq_start_.push_back(kv_->Length(seq));
      seq_tokens_.push_back(0);
    }
    const size_t expected = seq_start_[s] + seq_tokens_[s];
    if (batch.positions[t] < 0 || size_t(batch.positions[t]) != expected) {
      return Error("token %zu: position %d does not continue sequence %d (expected %zu)", first + t,
                   batch.positions[t], seq, expected);
    }
    ++seq_tokens_[s];
    token_seq_[t] = int32_t(s);
  }
  const size_t n_seqs = batch_seqs_.size();
  if (config.embeddings_only && !batch.hidden_output) {
    return Error("this %s model has no output head: it gives embeddings, not logits",
                 config.architecture.c_str());
  }
  if (!config.causal_attention) {
    // Every token sees its whole sequence, so a sequence's tokens must all be in this pass.
    for (size_t s = 0; s < n_seqs; ++s) {
      if (seq_start_[s] != 0) {
        return Error(
            "sequence %d: bidirectional attention needs the whole sequence in one pass, but %zu "
            "of its tokens were decoded before (raise --ubatch-size)",
            batch_seqs_[s], seq_start_[s]);
      }
    }
  }
  // Reserve KV slots; roll back on failure so no sequence changes.
  auto rollback = [&](size_t n_reserved) {
    for (size_t s = 0; s < n_reserved; ++s) (void)kv_->Truncate(batch_seqs_[s], seq_start_[s]);
  };
  seq_slots_.clear();
  slot_begin_.clear();
  for (size_t s = 0; s < n_seqs; ++s) {
    slot_begin_.push_back(int32_t(seq_slots_.size()));
    Status appended = kv_->Append(batch_seqs_[s], seq_tokens_[s], &seq_slots_);
    if (!appended.ok()) {
      rollback(s);
      return appended;
    }
  }
  // Block tables after every append (an append may copy a shared block).
  block_tables_.clear();
  block_table_begin_.clear();
  // Room for every sequence's whole context, so that a table growing by a block allocates nothing.
  block_tables_.reserve(n_seqs * ((kv_->context() + kv_->block_tokens() - 1) / kv_->block_tokens()));
  for (size_t s = 0; s < n_seqs; ++s) {
    block_table_begin_.push_back(int32_t(block_tables_.size()));
    const std::vector<int32_t>& table = kv_->BlockTable(batch_seqs_[s]);
    block_tables_.insert(block_tables_.end(), table.begin(), table.end());
  }
  block_table_begin_.push_back(int32_t(block_tables_.size()));
  seq_appended_.assign(n_seqs, 0);
  kv_slot_.resize(n);
  n_ctx_.resize(n);
  n_ctx_all_.resize(n);
  selected_.clear();
  size_t max_ctx = 0;
  for (size_t t = 0; t < n; ++t) {
    const size_t s = size_t(token_seq_[t]);
    kv_slot_[t] = seq_slots_[size_t(slot_begin_[s]) + seq_appended_[s]++];
    n_ctx_[t] = batch.positions[t] + 1;
    n_ctx_all_[t] = int32_t(seq_start_[s] + seq_tokens_[s]);
    max_ctx = std::max({max_ctx, size_t(n_ctx_[t]), size_t(n_ctx_all_[t])});
    if (batch.want_logits[t]) selected_.push_back(int32_t(t));
  }
  const bool any_wanted = !selected_.empty();
  if (!any_wanted) selected_.push_back(int32_t(n - 1));  // the graph needs one output row

  graph_.Clear();
  graph_.hidden_output = batch.hidden_output;
  model_->arch->build_graph(config, placed_, n, selected_.size(), &graph_);
  const size_t width = OutputWidth(batch.hidden_output);
  if (graph_.logits == kNoValue || size_t(graph_.values[size_t(graph_.logits)].cols) != width) {
    rollback(n_seqs);
    return Error("the %s graph does not give %s", config.architecture.c_str(),
                 batch.hidden_output ? "hidden states (no embeddings from this family)" : "logits");
  }
  const Graph* pass = &graph_;
  if (placed_lora_) {
    ChooseLoraApplications(n);
    placed_lora_->AddToGraph(placed_, graph_, lora_applications_, &lora_graph_);
    pass = &lora_graph_;
  }
  BatchContext context;
  context.n_tokens = n;
  context.tokens = batch.tokens.data();
  context.positions = batch.positions.data();
  context.n_seqs = n_seqs;
  context.token_seq = token_seq_.data();
  context.block_tables = block_tables_.data();
  context.block_table_begin = block_table_begin_.data();
  context.n_ctx = n_ctx_.data();
  context.kv_slot = kv_slot_.data();
  context.max_ctx = max_ctx;
  context.n_ctx_all = n_ctx_all_.data();
  context.selected_rows = selected_.data();
  context.n_selected = selected_.size();
  context.row_scales = lora_row_scales_.data();
  context.n_row_scales = n ? lora_row_scales_.size() / n : 0;
  std::vector<float>* out = any_wanted && logits ? logits : &unwanted_logits_;
  out->resize(selected_.size() * width);
  Status status = options_.pipeline ? RunStage(*pass, context, any_wanted, out->data())
                                    : executor_->Run(*pass, context, *kv_, out->data());
  if (!status.ok()) {
    rollback(n_seqs);
    return status;
  }
  if (!any_wanted && logits) logits->clear();
  return Status::Ok();
}

Status Engine::CheckStageMemory(const KvCacheOptions& kv) const {
  PETREL_ASSIGN_OR_RETURN(const std::vector<StageMemory> plan,
                          PlanStageMemory(*model_, {stage_}, kv, options_.ubatch_tokens));
  const StageMemory& memory = plan[0];
  // PlanStageMemory treats its one range as first and last; this stage's own weights instead.
  const size_t need = stage_weight_bytes_ + memory.kv_bytes + memory.activation_bytes;
  const size_t available = AvailableMemory();
  if (available == 0 || need <= available) return Status::Ok();
  return Error(
      "rank %d: blocks %d-%d need %.2f GiB (weights %.2f, KV cache %.2f, activations %.2f) but "
      "%.2f GiB is available there; give it fewer blocks with --mpi-split or lower -c",
      options_.pipeline->rank(), stage_.begin, stage_.end - 1, GiB(need), GiB(stage_weight_bytes_),
      GiB(memory.kv_bytes), GiB(memory.activation_bytes), GiB(available));
}

Status Engine::RunStage(const Graph& pass, const BatchContext& context, bool share, float* out) {
  PipelineLink& link = *options_.pipeline;
  const int n_layers = int(model_->config.n_layers);
  const bool last = stage_.end == n_layers;
  ValueId input = kNoValue;
  PETREL_RETURN_IF_ERROR(CutStage(pass, stage_, n_layers, &stage_graph_, &input, &stage_value_map_));
  if (input != kNoValue) {
    const ValueDesc& rows = stage_graph_.values[size_t(input)];
    stage_rows_in_.resize(size_t(rows.rows * rows.cols));
    PETREL_RETURN_IF_ERROR(link.ReceiveRows(stage_rows_in_.data(), stage_rows_in_.size()));
  }
  const ValueDesc& leaving = stage_graph_.values[size_t(stage_graph_.logits)];
  if (!last) stage_rows_out_.resize(size_t(leaving.rows * leaving.cols));
  PETREL_RETURN_IF_ERROR(executor_->Run(stage_graph_, context, *kv_,
                                        last ? out : stage_rows_out_.data(),
                                        stage_rows_in_.data(), input));
  if (!last) PETREL_RETURN_IF_ERROR(link.SendRows(stage_rows_out_.data(), stage_rows_out_.size()));
  if (!share) return Status::Ok();
  const ValueDesc& output = pass.values[size_t(pass.logits)];
  const size_t n_out = size_t(output.rows * output.cols);
  if (!first_stage_leads()) return link.ShareOutput(out, n_out);
  // Only the first stage, which samples, needs the output; it waits for it once the batch's
  // every pass is on its way (DecodePipelined).
  if (link.rank() == 0) return last ? Status::Ok() : link.PostOutputReceive(out, n_out);
  return last ? link.SendOutputToFirst(out, n_out) : Status::Ok();
}

uint64_t Engine::LoraKey(std::span<const float> scales) const {
  const std::span<const float> loaded =
      model_->lora ? model_->lora->default_scales() : std::span<const float>();
  if (scales.empty()) scales = loaded;
  uint64_t key = 0;
  for (size_t k = 0; k < scales.size(); ++k) {
    if (scales[k] == 0.0f) continue;  // -0 too: an adapter that does not apply
    uint32_t bits;
    std::memcpy(&bits, &scales[k], sizeof(bits));
    // splitmix64 steps over (index, scale bits); never 0 once an adapter applies.
    uint64_t h = key ^ ((uint64_t(k) << 32) | bits);
    h += 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    key = (h ^ (h >> 31)) | 1;
  }
  return key;
}

Status Engine::CheckLoraScales(std::span<const float> scales) const {
  if (scales.empty()) return Status::Ok();
  if (scales.size() != n_lora()) {
    return Error("%zu LoRA scales for %zu adapters", scales.size(), n_lora());
  }
  for (size_t k = 0; k < scales.size(); ++k) {
    if (!std::isfinite(scales[k])) return Error("LoRA adapter %zu: scale is not finite", k);
  }
  if (n_lora() > 0 && !options_.lora_per_sequence) {
    const std::span<const float> loaded = model_->lora->default_scales();
    if (!std::equal(scales.begin(), scales.end(), loaded.begin(), loaded.end())) {
      return Error("this engine applies its LoRA adapters to every sequence alike "
                   "(EngineOptions::lora_per_sequence is off)");
    }
  }
  return Status::Ok();
}

Status Engine::SetSequenceLora(SeqId seq, std::span<const float> scales) {
  if (Records()) {
    calls_.Call(EngineCall::kSetSequenceLora);
    calls_.Int(seq);
    calls_.Array(scales);
  }
  PETREL_RETURN_IF_ERROR(CheckLoraScales(scales));
  if (!kv_->HasSequence(seq)) return Error("sequence %d does not exist", seq);
  PETREL_RETURN_IF_ERROR(kv_->SetPrefixKey(seq, LoraKey(scales)));
  const std::span<const float> loaded =
      model_->lora ? model_->lora->default_scales() : std::span<const float>();
  if (scales.empty() || std::equal(scales.begin(), scales.end(), loaded.begin(), loaded.end())) {
    seq_lora_.erase(seq);
  } else {
    seq_lora_[seq].assign(scales.begin(), scales.end());
  }
  return Status::Ok();
}

SeqId Engine::NewSequenceFromCache(std::span<const int32_t> tokens, size_t* reused_tokens,
                                   std::span<const float> lora_scales) {
  const bool records = Records();
  RecordScope scope(this);
  const SeqId seq = kv_->NewSequenceFromPrefix(tokens, reused_tokens, LoraKey(lora_scales));
  // The key already matches; this records the scales the passes read.
  const Status set = SetSequenceLora(seq, lora_scales);
  PETREL_CHECK(set.ok());  // the caller checked the scales (CheckLoraScales)
  if (records) {
    calls_.Call(EngineCall::kNewSequenceFromCache);
    calls_.Array(tokens);
    calls_.Array(lora_scales);
    calls_.Int(seq);
  }
  return seq;
}

Result<SeqId> Engine::ForkSequence(SeqId seq) {
  Result<SeqId> forked = kv_->Fork(seq);
  if (Records()) {
    calls_.Call(EngineCall::kForkSequence);
    calls_.Int(seq);
    calls_.Int(forked.ok() ? *forked : -1);
  }
  PETREL_ASSIGN_OR_RETURN(const SeqId child, std::move(forked));
  if (auto found = seq_lora_.find(seq); found != seq_lora_.end()) {
    seq_lora_[child] = found->second;
  }
  return child;
}

void Engine::ChooseLoraApplications(size_t n_tokens) {
  const std::span<const float> loaded = placed_lora_->default_scales();
  const size_t n_adapters = loaded.size();
  lora_applications_.assign(n_adapters, LoraApplication{});
  lora_row_scales_.clear();
  // Each batch sequence's scales (batch_seqs_ order); most sequences keep the loaded ones.
  auto scale_of = [&](size_t s, size_t k) {
    const auto found = seq_lora_.find(batch_seqs_[s]);
    return found == seq_lora_.end() ? loaded[k] : found->second[k];
  };
  for (size_t k = 0; k < n_adapters; ++k) {
    const float first = scale_of(0, k);
    bool uniform = true;
    for (size_t s = 1; s < batch_seqs_.size() && uniform; ++s) uniform = scale_of(s, k) == first;
    if (uniform) {
      lora_applications_[k].uniform = first;
      continue;
    }
    lora_applications_[k].row_scales = int32_t(lora_row_scales_.size() / n_tokens);
    for (size_t t = 0; t < n_tokens; ++t) {
      lora_row_scales_.push_back(scale_of(size_t(token_seq_[t]), k));
    }
  }
}

Status Engine::Prefill(SeqId seq, const std::vector<int32_t>& tokens, bool all_logits,
                       std::vector<float>* logits) {
  logits->clear();
  // Checked before the first batch, so that the count is the whole prompt's and nothing is fed.
  if (kv_->Length(seq) + tokens.size() > kv_->context()) {
    return Error("sequence %d: %zu tokens exceed the context of %zu", seq,
                 kv_->Length(seq) + tokens.size(), kv_->context());
  }
  std::vector<float> chunk_logits;
  Batch batch;
  for (size_t begin = 0; begin < tokens.size(); begin += options_.max_batch_tokens) {
    const size_t end = std::min(tokens.size(), begin + options_.max_batch_tokens);
    batch.Clear();
    const size_t start = kv_->Length(seq);
    for (size_t i = begin; i < end; ++i) {
      batch.Add(tokens[i], int32_t(start + i - begin), seq, all_logits || i + 1 == tokens.size());
    }
    PETREL_RETURN_IF_ERROR(Decode(batch, &chunk_logits));
    logits->insert(logits->end(), chunk_logits.begin(), chunk_logits.end());
  }
  return Status::Ok();
}

}  // namespace petrel
