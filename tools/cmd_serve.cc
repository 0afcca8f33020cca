// `petrel serve`: the OpenAI-compatible HTTP server. It listens first (GET /health answers 503
// while the model loads), then serves until SIGTERM or SIGINT: it stops admitting, lets running
// streams finish (cancelled after --shutdown-timeout), and exits 0. A second signal exits at once.
// Under mpirun with --mpi, rank 0 serves and the other ranks replay its engine calls
// (docs/DISTRIBUTED.md); there a signal ends the job at once, running requests answered 503.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "core/chat/chat_prompt.h"
#include "core/model/loader.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tools/draft_options.h"
#include "tools/common.h"

namespace petrel::tools {
namespace {

// Signals are blocked in every thread and taken by one that waits for them, so that no thread
// of the pool or the scheduler is interrupted and the stop is an ordinary condition.
class StopSignal {
 public:
  // `on_first`: called on the waiting thread when the first signal comes.
  explicit StopSignal(std::function<void()> on_first = nullptr) : on_first_(std::move(on_first)) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // inherited by every thread started after
    thread_ = std::thread([this] { Wait(); });
    thread_.detach();
  }
  // Blocks until the first signal.
  int WaitForStop() {
    std::unique_lock<std::mutex> lock(mutex_);
    stopped_.wait(lock, [this] { return signal_ != 0; });
    return signal_;
  }
  bool stop_requested() {
    std::lock_guard<std::mutex> lock(mutex_);
    return signal_ != 0;
  }

 private:
  void Wait() {
    for (;;) {
      int signal = 0;
      if (sigwait(&set_, &signal) != 0) continue;
      std::lock_guard<std::mutex> lock(mutex_);
      if (signal_ != 0) std::_Exit(128 + signal);  // the second one: no more waiting
      signal_ = signal;
      if (on_first_) on_first_();
      stopped_.notify_all();
    }
  }
  sigset_t set_;
  std::function<void()> on_first_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable stopped_;
  int signal_ = 0;
};

// Every connection is a descriptor, and idle ones are held until their keep-alive timeout: the
// soft limit (often 1024) is raised to the hard one, so that many idle clients cannot make
// accept() fail for everyone else.
void RaiseDescriptorLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return;
  const rlim_t wanted = files.rlim_max == RLIM_INFINITY ? rlim_t(1) << 20 : files.rlim_max;
  if (files.rlim_cur >= wanted) return;
  files.rlim_cur = wanted;
  setrlimit(RLIMIT_NOFILE, &files);
}

// The options every rank loads the engine with: an embedding model's cache is F32 unless
// --cache-type says otherwise (it computes each sequence once and drops it, so its cache costs
// only precision, as in `petrel embed`; mapping the file here reads no weights).
ModelOptions ServeModelOptions(const ModelOptions& given, bool cache_type_given) {
  ModelOptions model_options = given;
  if (!cache_type_given) {
    LoadOptions peek;
    peek.load_tokenizer = false;
    auto peeked = LoadModel(given.model_path, peek);
    if (peeked.ok() && (*peeked)->config.embeddings_only) model_options.kv_type = "f32";
  }
  // The pool is the server's for its whole life: its pages are made real at load, not by the
  // first requests (KvCacheOptions::touch).
  model_options.touch_kv = true;
  return model_options;
}

// A rank other than 0 under --mpi: loads its blocks and replays rank 0's engine calls until
// rank 0 stops serving.
int FollowRankZero(const ModelOptions& model_options, size_t parallel, size_t kv_blocks) {
  auto engine = model_options.LoadEngine(parallel, kv_blocks);
  if (!engine.ok()) return Fail(engine.status());
  const Status followed = (*engine)->FollowFirstStage();
  if (!followed.ok()) return Fail(followed);
  return 0;
}

}  // namespace

Runner AddServeCommand(CLI::App& app) {
  struct Args {
    ModelOptions model;
    DraftOptions draft;
    std::string host = "127.0.0.1";
    int64_t port = 8080;
    int64_t parallel = 4;
    int64_t batch_tokens = 0;
    int64_t max_queue = 64;
    int64_t kv_blocks = 0;
    std::string api_key;
    std::string template_file;
    std::string tool_call_format = "auto";
    std::string reasoning_format = "auto";
    std::string model_name;
    int64_t max_body_kib = 8 << 10;
    int64_t shutdown_timeout = 30;
    bool no_access_log = false;
    bool no_web_ui = false;
    bool embeddings = false;
    std::string shared_prefix_attention = "on";
    int64_t mpi_micro_batches = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "serve the model over an OpenAI-compatible HTTP API (continuous batching)");
  args->model.AddTo(*cmd);
  args->draft.AddTo(*cmd);
  args->model.mpi.AddTo(*cmd);
  cmd->add_option("--mpi-micro-batches", args->mpi_micro_batches,
                  "with --mpi: passes each step is cut into, so that every rank works at once "
                  "(default: one per rank)")
      ->check(IntRange(1, 64));
  cmd->add_option("--host", args->host,
                  "address to listen on (default 127.0.0.1, this machine only; 0.0.0.0: every "
                  "interface)");
  cmd->add_option("--port", args->port, "TCP port (default 8080; 0: a free one, printed)")
      ->check(IntRange(0, 65535));
  cmd->add_option("--parallel", args->parallel,
                  "sequences decoded at once at most; by default the KV cache holds this many full "
                  "contexts (default 4)")
      ->check(IntRange(1, 256));
  CLI::Option* batch_tokens =
      cmd->add_option("--batch-tokens", args->batch_tokens,
                      "tokens per scheduler step: decodes plus prompt chunks (default: -b, 512)")
          ->check(IntRange(1, kMaxBatch));
  cmd->add_option("--kv-blocks", args->kv_blocks,
                  "KV cache blocks (of 16 tokens) shared by all sequences (default: --parallel "
                  "full contexts)")
      ->check(IntRange(1, 1 << 24));
  cmd->add_option("--max-queue", args->max_queue,
                  "requests waiting for a slot at most; more get HTTP 429 (default 64)")
      ->check(IntRange(0, 4096));
  cmd->add_option("--api-key", args->api_key,
                  "require \"Authorization: Bearer KEY\" on every route but /health and the web "
                  "page's files (the page asks for the key)");
  cmd->add_option("--chat-template-file", args->template_file,
                  "this Jinja template instead of the model's for /v1/chat/completions")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tool-call-format", args->tool_call_format,
                  "how tool calls are read from replies: auto (the chat template's own syntax), "
                  "hermes, llama3, mistral, generic, harmony (default auto)")
      ->check(CLI::IsMember({"auto", "hermes", "llama3", "mistral", "generic", "harmony"}));
  cmd->add_option("--reasoning-format", args->reasoning_format,
                  "auto: a <think> block goes to reasoning_content when the chat template uses "
                  "think tags; none: it stays in content (default auto; requests may override)")
      ->check(CLI::IsMember({"auto", "none"}));
  cmd->add_option("--model-name", args->model_name,
                  "the model id /v1/models reports (default: the model file's name)");
  cmd->add_option("--max-body-kib", args->max_body_kib,
                  "largest request body in KiB; larger ones get HTTP 413 (default 8192)")
      ->check(IntRange(1, 1 << 20));
  cmd->add_option("--shutdown-timeout", args->shutdown_timeout,
                  "seconds running requests may take to finish after SIGTERM/SIGINT before they "
                  "are cancelled (default 30)")
      ->check(IntRange(0, 3600));
  cmd->add_option("--shared-prefix-attn", args->shared_prefix_attention,
                  "on: decode steps read KV blocks that running sequences share (a common system "
                  "prompt) once for all of them; off: once per sequence. The same output either "
                  "way (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_flag("--no-access-log", args->no_access_log, "no line per request on stderr");
  cmd->add_flag("--no-webui", args->no_web_ui, "no chat page at / (it answers 404)");
  cmd->add_flag("--embeddings", args->embeddings,
                "also answer /v1/embeddings (always on for a model that gives only embeddings)");
  CLI::Option* cache_type = cmd->get_option("--cache-type");
  return [args, batch_tokens, cache_type]() -> int {
    if (batch_tokens->count() > 0) {
      if (args->model.batch != 512 && args->model.batch != size_t(args->batch_tokens)) {
        return Fail(Error("-b %zu and --batch-tokens %lld disagree (give one)", args->model.batch,
                          (long long)args->batch_tokens));
      }
      args->model.batch = size_t(args->batch_tokens);
    }
    if (Status status = args->model.Check(); !status.ok()) return Fail(status);
    if (Status status = args->draft.Check(); !status.ok()) return Fail(status);
    args->model.lora_per_sequence = true;  // requests choose their adapters (`lora`)
    const bool mpi = args->model.mpi.enabled;
    // Before MPI starts its threads (ToEngineOptions joins the job), so that they too leave
    // the signals to this one. Under MPI a signal ends every wait for another rank at once:
    // mpirun signals every rank when one dies, and kills them a second later.
    StopSignal stop(mpi ? std::function<void()>(InterruptMpiWaits) : nullptr);
    if (mpi && args->draft.enabled()) {
      return Fail(Error("--draft and --lookup-ngram are not supported with --mpi yet"));
    }
    args->model.mpi.first_rank_leads = true;
    args->model.mpi.micro_batches = size_t(args->mpi_micro_batches);
    args->model.shared_prefix_attention = args->shared_prefix_attention == "on";
    // The --lora arguments (names included) are checked before anything listens.
    if (auto options = args->model.ToEngineOptions(); !options.ok()) return Fail(options.status());
    // The common mistake is one error line, before anything listens.
    std::error_code missing;
    if (!std::filesystem::exists(args->model.model_path, missing)) {
      return Fail(Error("%s: no such file or folder", args->model.model_path.c_str()));
    }
    if (mpi && MpiRank() != 0) {
      return FollowRankZero(ServeModelOptions(args->model, cache_type->count() > 0),
                            size_t(args->parallel), size_t(args->kv_blocks));
    }
    // A write to a connection its client closed must fail with EPIPE (the stream is then
    // cancelled), not end the process.
    signal(SIGPIPE, SIG_IGN);
    RaiseDescriptorLimit();

    server::Metrics metrics;
    server::HttpServerOptions http;
    http.host = args->host;
    http.port = int(args->port);
    http.api_key = args->api_key;
    http.max_body_bytes = size_t(args->max_body_kib) << 10;
    // Every queued or running request holds a connection thread while it waits.
    http.threads = size_t(args->parallel + args->max_queue) + 16;
    http.access_log = !args->no_access_log;
    http.web_ui = !args->no_web_ui;
    http.model_name = args->model_name.empty()
                          ? std::filesystem::path(args->model.model_path).filename().string()
                          : args->model_name;
    if (http.model_name.empty()) {
      http.model_name = std::filesystem::path(args->model.model_path).parent_path().filename();
    }
    server::HttpServer server(http, metrics);
    if (Status status = server.Start(); !status.ok()) return Fail(status);
    std::fprintf(stderr, "petrel serve: listening on http://%s:%d (loading %s)\n",
                 args->host.c_str(), server.port(), args->model.model_path.c_str());

    // Tests of the loading state (GET /health answers 503) need a load that lasts.
    if (const char* delay = std::getenv("PETREL_SERVE_TEST_LOAD_DELAY_MS")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
    }
    const ModelOptions model_options = ServeModelOptions(args->model, cache_type->count() > 0);
    auto engine = model_options.LoadEngine(size_t(args->parallel), size_t(args->kv_blocks));
    if (!engine.ok()) return Fail(engine.status());
    if (!(*engine)->tokenizer()) return Fail(Error("the model has no tokenizer"));
    // Chat needs a template; without one the server still serves /v1/completions.
    std::unique_ptr<ChatPrompt> chat;
    const bool embeddings_only = (*engine)->config().embeddings_only;
    auto loaded = args->template_file.empty() ? ChatPrompt::Load(args->model.model_path)
                                              : ChatPrompt::LoadFile(args->template_file);
    if (loaded.ok()) {
      chat = std::make_unique<ChatPrompt>(std::move(loaded).value());
    } else if (!args->template_file.empty()) {
      return Fail(loaded.status());
    } else if (!embeddings_only) {
      Warn("%s; /v1/chat/completions will answer 400 (see --chat-template-file)",
           loaded.status().message().c_str());
    }
    // Requests sample with their own parameters, so the draft proposes its argmax: a point
    // mass, which the acceptance rule verifies exactly under any of them.
    SamplingParams draft_sampling;
    draft_sampling.temperature = 0.0f;
    auto speculator = args->draft.MakeSpeculator(**engine, args->model, draft_sampling);
    if (!speculator.ok()) return Fail(speculator.status());
    server::SchedulerOptions scheduling;
    scheduling.speculator = speculator->get();
    // Tests of a full queue need a request that keeps running (see SchedulerOptions).
    if (const char* delay = std::getenv("PETREL_SERVE_TEST_STEP_DELAY_MS")) {
      scheduling.step_delay = std::chrono::milliseconds(std::clamp(std::atoi(delay), 0, 1000));
    }
    scheduling.parallel = size_t(args->parallel);
    scheduling.max_waiting = size_t(args->max_queue);
    scheduling.batch_tokens = (*engine)->options().max_batch_tokens;
    if (mpi) {
      // A failed transfer between ranks ends the server as a signal does; the requests it
      // held get 503 (a rank that died makes mpirun signal every other rank anyway).
      scheduling.engine_lost = [&stop] {
        if (!MpiPipelineBroken()) return false;
        if (!stop.stop_requested()) ::kill(::getpid(), SIGTERM);
        return true;
      };
    }
    server::Scheduler scheduler(**engine, scheduling, metrics);
    scheduler.Start();
    server::ServingModel serving;
    serving.engine = engine->get();
    serving.scheduler = &scheduler;
    serving.chat = chat.get();
    serving.embeddings = args->embeddings || embeddings_only;
    serving.tool_call_format = server::ToolCallFormatFromName(args->tool_call_format);
    serving.reasoning_format = args->reasoning_format;
    server.SetModel(serving);
    std::fprintf(stderr,
                 "petrel serve: ready: model %s, %lld parallel sequences of up to %zu tokens, "
                 "%zu KV blocks of %zu tokens, %zu tokens per step\n",
                 http.model_name.c_str(), (long long)args->parallel, (*engine)->context(),
                 (*engine)->kv_total_blocks(), (*engine)->kv_block_tokens(),
                 scheduling.batch_tokens);

    const int signal = stop.WaitForStop();
    if (mpi) {
      // mpirun signals every rank when one dies, and kills them a second later: the requests
      // are answered now, without waiting for ranks that may be gone.
      InterruptMpiWaits();
      std::fprintf(stderr, "petrel serve: %s: the MPI job is ending; running requests get 503\n",
                   signal == SIGTERM ? "SIGTERM" : "SIGINT");
      server.SetStopping();
      scheduler.Shutdown(std::chrono::milliseconds(0));
      server.DrainStreams(std::chrono::milliseconds(500));
      server.Stop();
      return 1;
    }
    std::fprintf(stderr, "petrel serve: %s: finishing running requests (at most %lld s)\n",
                 signal == SIGTERM ? "SIGTERM" : "SIGINT", (long long)args->shutdown_timeout);
    server.SetStopping();
    scheduler.Shutdown(std::chrono::seconds(args->shutdown_timeout));
    // The scheduler has sent every stream its end; let the connections write it.
    server.DrainStreams(std::chrono::seconds(5));
    server.Stop();
    std::fprintf(stderr, "petrel serve: stopped\n");
    return 0;
  };
}

}  // namespace petrel::tools
