// Embeddings: the BERT family's sentence embeddings and hidden states against the golden files
// (GGUF and Hugging Face folder, cpu and ref backends), that each of its features matters (a
// causal mask, another pooling, no normalisation fail parity), hostile configs as one-line
// errors, and a decoder used as an embedder (last-token pooling).
#include "core/generation/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/format/gguf.h"
#include "core/format/gguf_writer.h"
#include "core/model/loader.h"
#include "core/runtime/engine.h"
#include "core/tokenizer/tokenizer.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

namespace fs = std::filesystem;

std::string Models() { return testing::SharedDir() + "/models/synth-arch2"; }
std::string Golden(const std::string& name) {
  return testing::SharedDir() + "/golden/synth-arch2/" + name;
}
nlohmann::json Parity() { return testing::ReadJson(Golden("parity.json"))["bert"]; }

std::vector<std::vector<int32_t>> Sequences() {
  return Parity()["sequences"].get<std::vector<std::vector<int32_t>>>();
}

std::unique_ptr<Engine> Load(const std::string& path, const std::string& device = "cpu") {
  EngineOptions options;
  options.n_threads = 2;
  options.kv_type = DType::kF32;  // the README's tolerances are for an F32 cache
  options.max_sequences = 4;
  options.device = device;
  options.device_layer_rule = GpuLayerRule::kAll;
  auto engine = Engine::Load(path, options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

struct EmbeddingStats {
  double max_abs = 0, rel_rms = 0, min_cosine = 1;
  std::string ToString() const {
    char buffer[128];
    std::snprintf(buffer, sizeof(buffer), "max abs %.3g, rel RMS %.3g, min cosine %.9f", max_abs,
                  rel_rms, min_cosine);
    return buffer;
  }
};

EmbeddingStats Compare(const std::vector<std::vector<float>>& got, const std::vector<float>& want,
                       size_t dim) {
  EmbeddingStats stats;
  double diff_sq = 0, ref_sq = 0;
  EXPECT_EQ(got.size() * dim, want.size());
  for (size_t r = 0; r < got.size() && (r + 1) * dim <= want.size(); ++r) {
    EXPECT_EQ(got[r].size(), dim);
    double dot = 0, a2 = 0, b2 = 0;
    for (size_t i = 0; i < dim && i < got[r].size(); ++i) {
      const double a = got[r][i], b = want[r * dim + i];
      stats.max_abs = std::max(stats.max_abs, std::fabs(a - b));
      diff_sq += (a - b) * (a - b);
      ref_sq += b * b;
      dot += a * b;
      a2 += a * a;
      b2 += b * b;
    }
    stats.min_cosine = std::min(stats.min_cosine, dot / std::sqrt(a2 * b2));
  }
  stats.rel_rms = std::sqrt(diff_sq / std::max(ref_sq, 1e-30));
  return stats;
}

// The README's bert rows: embeddings 1e-5 / 1e-5 and cosine >= 0.99999.
bool EmbeddingsWithin(const EmbeddingStats& s) {
  return s.max_abs <= 1e-5 && s.rel_rms <= 1e-5 && s.min_cosine >= 0.99999;
}

EmbeddingStats EmbeddingParity(Engine& engine, const EmbedOptions& options = {}) {
  auto embeddings = Embed(engine, Sequences(), options);
  EXPECT_TRUE(embeddings.ok()) << embeddings.status().message();
  if (!embeddings.ok()) return {INFINITY, INFINITY, -1};
  return Compare(embeddings->vectors, testing::ReadF32File(Golden("bert.f32")), 64);
}

// The last hidden states of sequence 0, every token.
std::vector<float> Hidden0(Engine& engine) {
  const std::vector<int32_t> ids = Sequences()[0];
  const SeqId seq = engine.NewSequence();
  Batch batch;
  batch.hidden_output = true;
  for (size_t t = 0; t < ids.size(); ++t) batch.Add(ids[t], int32_t(t), seq, true);
  std::vector<float> hidden;
  const Status status = engine.Decode(batch, &hidden);
  EXPECT_TRUE(status.ok()) << status.message();
  engine.FreeSequence(seq);
  return hidden;
}

void CheckBert(const std::string& path, const std::string& device) {
  auto engine = Load(path, device);
  ASSERT_TRUE(engine);
  const EmbeddingStats stats = EmbeddingParity(*engine);
  EXPECT_TRUE(EmbeddingsWithin(stats)) << path << " on " << device << ": " << stats.ToString();
  std::printf("%s on %s, embeddings: %s\n", path.c_str(), device.c_str(), stats.ToString().c_str());
  const auto hidden = testing::CompareLogits(Hidden0(*engine),
                                             testing::ReadF32File(Golden("bert.hidden0.f32")), 64);
  EXPECT_LE(hidden.max_abs, 1e-4) << hidden.ToString();
  EXPECT_LE(hidden.rel_rms, 1e-5) << hidden.ToString();
  std::printf("%s on %s, hidden states: %s\n", path.c_str(), device.c_str(),
              hidden.ToString().c_str());
}

TEST(BertParity, GgufOnCpu) { CheckBert(Models() + "/bert.gguf", "cpu"); }
TEST(BertParity, HfFolderOnCpu) { CheckBert(Models() + "/bert-hf", "cpu"); }
TEST(BertParity, GgufOnRef) { CheckBert(Models() + "/bert.gguf", "ref"); }
TEST(BertParity, HfFolderOnRef) { CheckBert(Models() + "/bert-hf", "ref"); }

// Both tokenizers give the golden ids: [CLS] text [SEP], lowercased WordPiece.
TEST(BertParity, TokenizersAddClsAndSep) {
  const nlohmann::json parity = Parity();
  for (const std::string path : {Models() + "/bert.gguf", Models() + "/bert-hf"}) {
    auto tokenizer = LoadTokenizer(path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    for (size_t i = 0; i < parity["texts"].size(); ++i) {
      EXPECT_EQ((*tokenizer)->Encode(parity["texts"][i].get<std::string>()),
                parity["sequences"][i].get<std::vector<int32_t>>())
          << path << " text " << i;
    }
  }
}

// Batching does not change a sequence's embedding: each alone equals the batch of four.
TEST(BertParity, BatchedEqualsAlone) {
  auto engine = Load(Models() + "/bert.gguf");
  ASSERT_TRUE(engine);
  const auto sequences = Sequences();
  auto together = Embed(*engine, sequences);
  ASSERT_TRUE(together.ok()) << together.status().message();
  for (size_t i = 0; i < sequences.size(); ++i) {
    auto alone = Embed(*engine, std::vector<std::vector<int32_t>>{sequences[i]});
    ASSERT_TRUE(alone.ok());
    for (size_t d = 0; d < 64; ++d) {
      EXPECT_NEAR(alone->vectors[0][d], together->vectors[i][d], 1e-6) << i << " " << d;
    }
  }
  EXPECT_EQ(together->tokens, size_t(22 + 23 + 34 + 5));
}

// What would go wrong without each feature: the golden README's ablations, above tolerance.
TEST(BertFeatures, OtherPoolingOrNoNormalisationFailsParity) {
  auto engine = Load(Models() + "/bert.gguf");
  ASSERT_TRUE(engine);
  EmbedOptions cls;
  cls.pooling = PoolingKind::kCls;
  EXPECT_FALSE(EmbeddingsWithin(EmbeddingParity(*engine, cls)));
  EmbedOptions last;
  last.pooling = PoolingKind::kLast;
  EXPECT_FALSE(EmbeddingsWithin(EmbeddingParity(*engine, last)));
  EmbedOptions raw;
  raw.normalize = -1;
  EXPECT_FALSE(EmbeddingsWithin(EmbeddingParity(*engine, raw)));
  EmbedOptions mean;  // the model's own, said explicitly
  mean.pooling = PoolingKind::kMean;
  EXPECT_TRUE(EmbeddingsWithin(EmbeddingParity(*engine, mean)));
}

// A copy of bert.gguf with its metadata edited by `edit` and without the tensors `drop` names.
std::string RewriteGguf(const std::string& name, const std::function<void(GgufWriter&)>& edit,
                        const std::string& drop = "") {
  auto in = GgufFile::Open(Models() + "/bert.gguf");
  EXPECT_TRUE(in.ok());
  GgufWriter writer;
  for (const auto& [key, value] : (*in)->metadata()) {
    if (key != "general.alignment") writer.CopyValue(key, value);
  }
  edit(writer);
  for (const GgufTensorInfo& info : (*in)->tensors()) {
    if (info.name == drop) continue;
    const void* data = info.data;
    const size_t bytes = info.desc.bytes();
    writer.AddTensor(info.name, info.desc,
                     [data, bytes](void* dst) { std::memcpy(dst, data, bytes); });
  }
  const std::string path = testing::ScratchDir() + "/embedding_" + name + ".gguf";
  EXPECT_TRUE(writer.Write(path).ok());
  return path;
}

// A copy of bert-hf with `patch` merged into config.json and `files` written (path -> text).
std::string RewriteHf(const std::string& name, const nlohmann::json& patch,
                      const std::vector<std::pair<std::string, std::string>>& files = {}) {
  const fs::path source = Models() + "/bert-hf";
  const fs::path folder = testing::ScratchDir() + "/embedding_" + name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  for (const fs::directory_entry& entry : fs::directory_iterator(source)) {
    const std::string file = entry.path().filename().string();
    if (file == "config.json" || file == "1_Pooling") continue;
    fs::create_symlink(fs::absolute(entry.path()), folder / file);
  }
  fs::create_directories(folder / "1_Pooling");
  fs::copy_file(source / "1_Pooling" / "config.json", folder / "1_Pooling" / "config.json");
  std::ifstream in(source / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config.update(patch);
  std::ofstream(folder / "config.json") << config.dump(2);
  for (const auto& [path, text] : files) {
    fs::remove(folder / path);
    std::ofstream(folder / path) << text;
  }
  return folder.string();
}

TEST(BertFeatures, CausalMaskFailsParity) {
  // GGUF `bert.attention.causal` and HF `is_decoder` both make BERT's attention causal.
  for (const std::string path :
       {RewriteGguf("causal", [](GgufWriter& w) { w.SetBool("bert.attention.causal", true); }),
        RewriteHf("causal", {{"is_decoder", true}})}) {
    auto engine = Load(path);
    ASSERT_TRUE(engine);
    const EmbeddingStats stats = EmbeddingParity(*engine);
    EXPECT_FALSE(EmbeddingsWithin(stats)) << path << ": " << stats.ToString();
    EXPECT_GT(stats.max_abs, 0.01) << stats.ToString();  // the README's ablation: 0.14
  }
}

void ExpectLoadError(const std::string& path, const std::string& needle,
                     EngineOptions options = {}) {
  options.n_threads = 1;
  auto engine = Engine::Load(path, options);
  ASSERT_FALSE(engine.ok()) << path << " loaded; expected: " << needle;
  const std::string message = engine.status().message();
  EXPECT_NE(message.find(needle), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(BertHostile, OneLineErrors) {
  ExpectLoadError(RewriteGguf("pool7", [](GgufWriter& w) { w.SetU32("bert.pooling_type", 7); }),
                  "pooling type 7 is not known");
  ExpectLoadError(RewriteGguf("pool4", [](GgufWriter& w) { w.SetU32("bert.pooling_type", 4); }),
                  "rank");
  ExpectLoadError(RewriteGguf(
                      "nopos", [](GgufWriter&) {}, "position_embd.weight"),
                  "tensor position_embd.weight is missing");
  ExpectLoadError(RewriteGguf(
                      "notypes", [](GgufWriter&) {}, "token_types.weight"),
                  "tensor token_types.weight is missing");
  ExpectLoadError(
      RewriteGguf("heads5", [](GgufWriter& w) { w.SetU32("bert.attention.head_count", 5); }),
      "not a multiple of the 5 heads");
  ExpectLoadError(
      RewriteGguf("types0", [](GgufWriter& w) { w.SetU32("tokenizer.ggml.token_type_count", 0); }),
      "token type count 0 is invalid");
  ExpectLoadError(RewriteHf("tanh", {{"hidden_act", "gelu_new"}}), "hidden_act 'gelu_new'");
  ExpectLoadError(RewriteHf("relative", {{"position_embedding_type", "relative_key"}}),
                  "position_embedding_type 'relative_key'");
  ExpectLoadError(
      RewriteHf("maxpool", nlohmann::json::object(),
                {{"1_Pooling/config.json",
                  R"({"pooling_mode_max_tokens": true, "pooling_mode_mean_tokens": false})"}}),
      "pooling_mode_max_tokens is not supported");
  ExpectLoadError(
      RewriteHf("twopool", nlohmann::json::object(),
                {{"1_Pooling/config.json",
                  R"({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true})"}}),
      "expected one pooling mode, found 2");
  ExpectLoadError(RewriteHf("badflag", nlohmann::json::object(),
                            {{"1_Pooling/config.json", R"({"pooling_mode_cls_token": "yes"})"}}),
                  "must be true or false");
  ExpectLoadError(
      RewriteHf("badmodules", nlohmann::json::object(), {{"modules.json", R"({"not": "a list"})"}}),
      "expected a JSON array of modules");
  // More context than the 128 learned positions.
  EngineOptions long_context;
  long_context.context = 512;
  ExpectLoadError(Models() + "/bert.gguf", "exceeds the model's 128 learned positions",
                  long_context);
}

TEST(BertHostile, EmbedRefusesBadInputsAndLogits) {
  auto engine = Load(Models() + "/bert.gguf");
  ASSERT_TRUE(engine);
  auto expect_error = [&](std::vector<std::vector<int32_t>> inputs, const std::string& needle) {
    auto result = Embed(*engine, inputs);
    ASSERT_FALSE(result.ok()) << needle;
    EXPECT_NE(result.status().message().find(needle), std::string::npos)
        << needle << " vs " << result.status().message();
  };
  expect_error({{2, 3}, {}}, "input 1 is empty");
  expect_error({{2, 5000, 3}}, "(id 5000) is outside the vocabulary");
  expect_error({{2, -1, 3}}, "(id -1) is outside the vocabulary");
  expect_error({std::vector<int32_t>(200, 7)}, "input 0 has 200 tokens");
  // A model without an output head gives no logits.
  const SeqId seq = engine->NewSequence();
  Batch batch;
  batch.Add(2, 0, seq, true);
  std::vector<float> logits;
  const Status status = engine->Decode(batch, &logits);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("no output head"), std::string::npos) << status.message();
  EXPECT_EQ(engine->SequenceLength(seq), 0u);
}

// A decoder as an embedder: last-token pooling of the final norm's output, which is what the
// output head reads (so the logits are that vector times the head), batched or alone.
TEST(DecoderEmbeddings, LastTokenOfTheFinalNorm) {
  auto engine = Load(testing::SharedDir() + "/models/synth-tiny/tiny-v2048-f32.gguf");
  ASSERT_TRUE(engine);
  EXPECT_EQ(engine->config().DefaultPooling(), PoolingKind::kLast);
  const std::vector<std::vector<int32_t>> inputs = {{1, 20, 30, 40}, {1, 7}, {1, 99, 5, 6, 7, 8}};
  EmbedOptions raw;
  raw.normalize = -1;
  auto together = Embed(*engine, inputs, raw);
  ASSERT_TRUE(together.ok()) << together.status().message();
  const size_t dim = size_t(engine->config().dim);
  ASSERT_EQ(together->dim, dim);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SeqId seq = engine->NewSequence();
    Batch batch;
    batch.hidden_output = true;
    for (size_t t = 0; t < inputs[i].size(); ++t) {
      batch.Add(inputs[i][t], int32_t(t), seq, t + 1 == inputs[i].size());
    }
    std::vector<float> hidden;
    ASSERT_TRUE(engine->Decode(batch, &hidden).ok());
    engine->FreeSequence(seq);
    ASSERT_EQ(hidden.size(), dim);
    for (size_t d = 0; d < dim; ++d) EXPECT_NEAR(together->vectors[i][d], hidden[d], 1e-5);
  }
  // Normalised by default: unit length.
  auto unit = Embed(*engine, inputs);
  ASSERT_TRUE(unit.ok());
  for (const auto& v : unit->vectors) {
    double norm = 0;
    for (float x : v) norm += double(x) * x;
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
  // Mean pooling of a causal model reads every row; chunks longer than a batch continue it.
  EmbedOptions mean;
  mean.pooling = PoolingKind::kMean;
  EXPECT_TRUE(Embed(*engine, inputs, mean).ok());
}

TEST(EmbeddingNormalize, LlamaCppRules) {
  std::vector<float> v = {3, -4};
  NormalizeEmbedding(v, 2);
  EXPECT_NEAR(v[0], 0.6, 1e-6);
  EXPECT_NEAR(v[1], -0.8, 1e-6);
  v = {3, -4};
  NormalizeEmbedding(v, 1);
  EXPECT_NEAR(v[0], 3.0 / 7, 1e-6);
  v = {3, -4};
  NormalizeEmbedding(v, 0);
  EXPECT_NEAR(v[1], -32760.0f, 1e-2);
  v = {3, -4};
  NormalizeEmbedding(v, -1);
  EXPECT_EQ(v[0], 3.0f);
  v = {0, 0};
  NormalizeEmbedding(v, 2);  // a zero vector stays zero
  EXPECT_EQ(v[0], 0.0f);
}

}  // namespace
}  // namespace petrel
