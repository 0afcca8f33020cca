// The KL-divergence base file: writing rows as 16-bit log-probabilities, reading them back.
#include "core/eval/kld_base_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace petrel {
namespace {

constexpr char kMagic[8] = {'P', 'T', 'R', 'L', 'K', 'L', 'D', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 40;
constexpr double kCodeMax = 65535.0;

uint64_t RecordBytes(uint32_t n_vocab) { return 12 + 2 * uint64_t(n_vocab); }

template <typename T>
void Put(std::vector<uint8_t>* out, size_t offset, T value) {
  std::memcpy(out->data() + offset, &value, sizeof(T));
}

template <typename T>
T Get(const uint8_t* in) {
  T value;
  std::memcpy(&value, in, sizeof(T));
  return value;
}

}  // namespace

uint64_t HashVocabulary(size_t n_vocab, const std::function<std::string_view(int32_t)>& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&hash](uint8_t byte) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  };
  for (size_t id = 0; id < n_vocab; ++id) {
    for (const char c : text(int32_t(id))) mix(uint8_t(c));
    mix(0xFF);
  }
  return hash;
}

uint64_t BaseFileBytes(const KldBaseHeader& header) {
  // Saturating: a corrupt header's product of three 32-bit values must not wrap around to a
  // plausible size. Checked 64-bit arithmetic, as 32-bit targets have no 128-bit integers.
  const uint64_t tokens = uint64_t(header.n_chunks) * header.n_ctx;  // two 32-bit factors: fits
  const uint64_t scored = uint64_t(header.n_chunks) * (header.n_ctx - 1 - header.n_ctx / 2);
  uint64_t token_bytes = 0, records = 0, bytes = 0;
  if (__builtin_mul_overflow(tokens, uint64_t{4}, &token_bytes) ||
      __builtin_mul_overflow(scored, RecordBytes(header.n_vocab), &records) ||
      __builtin_add_overflow(records, token_bytes, &bytes) ||
      __builtin_add_overflow(bytes, kHeaderBytes, &bytes)) {
    return UINT64_MAX;
  }
  return bytes;
}

Result<KldBaseWriter> KldBaseWriter::Begin(AtomicFile file, const KldBaseHeader& header,
                                           std::span<const int32_t> tokens) {
  if (tokens.size() != size_t(header.n_chunks) * header.n_ctx) {
    return Error("internal: %zu tokens for %u windows of %u", tokens.size(), header.n_chunks,
                 header.n_ctx);
  }
  KldBaseWriter writer(std::move(file));
  writer.header_ = header;
  const ChunkPlan plan{
      .n_ctx = header.n_ctx, .n_chunks = header.n_chunks, .first = header.n_ctx / 2};
  writer.expected_records_ = plan.scored();
  std::vector<uint8_t> bytes(kHeaderBytes, 0);
  std::memcpy(bytes.data(), kMagic, sizeof(kMagic));
  Put(&bytes, 8, kVersion);
  Put(&bytes, 12, header.n_vocab);
  Put(&bytes, 16, header.n_ctx);
  Put(&bytes, 20, header.n_chunks);
  Put(&bytes, 24, header.vocab_hash);
  Put(&bytes, 32, uint64_t(0));
  writer.file_.Write(bytes.data(), bytes.size());
  writer.file_.Write(tokens.data(), tokens.size_bytes());
  writer.log_probs_.resize(header.n_vocab);
  writer.record_.resize(RecordBytes(header.n_vocab));
  return writer;
}

void KldBaseWriter::Add(std::span<const float> logits, int32_t token) {
  LogSoftmax(logits, log_probs_);
  const float low = *std::min_element(log_probs_.begin(), log_probs_.end());
  Put(&record_, 0, float(LogProbOf(logits, token)));
  Put(&record_, 4, Argmax(logits));
  Put(&record_, 8, low);
  // code = (log p − low) / −low × 65535, so the largest log-probability (≈ 0) codes near 65535.
  const double scale = low < 0 ? kCodeMax / -double(low) : 0.0;
  for (size_t i = 0; i < log_probs_.size(); ++i) {
    const double code = std::round((double(log_probs_[i]) - low) * scale);
    Put(&record_, 12 + 2 * i, uint16_t(std::clamp(code, 0.0, kCodeMax)));
  }
  file_.Write(record_.data(), record_.size());
  ++records_;
}

Status KldBaseWriter::Commit() {
  if (records_ != expected_records_) {
    return Error("internal: %llu positions written to %s, %llu expected",
                 (unsigned long long)records_, file_.path().c_str(),
                 (unsigned long long)expected_records_);
  }
  return file_.Commit();
}

Result<KldBaseReader> KldBaseReader::Open(const std::string& path) {
  KldBaseReader reader;
  reader.path_ = path;
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    return Error("%s: %s", path.c_str(), std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode))
    return Error("%s: is a folder, not a KL-divergence base file", path.c_str());
  reader.file_ = std::fopen(path.c_str(), "rb");
  if (!reader.file_) return Error("%s: %s", path.c_str(), std::strerror(errno));
  uint8_t bytes[kHeaderBytes];
  if (std::fread(bytes, 1, kHeaderBytes, reader.file_) != kHeaderBytes ||
      std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) {
    return Error(
        "%s: not a KL-divergence base file (written by petrel perplexity "
        "--kl-divergence-base)",
        path.c_str());
  }
  const uint32_t version = Get<uint32_t>(bytes + 8);
  if (version != kVersion) {
    return Error("%s: KL-divergence base file version %u; this build reads version %u",
                 path.c_str(), version, kVersion);
  }
  KldBaseHeader& header = reader.header_;
  header.n_vocab = Get<uint32_t>(bytes + 12);
  header.n_ctx = Get<uint32_t>(bytes + 16);
  header.n_chunks = Get<uint32_t>(bytes + 20);
  header.vocab_hash = Get<uint64_t>(bytes + 24);
  if (header.n_vocab == 0 || header.n_chunks == 0 || header.n_ctx < kMinPerplexityContext) {
    return Error("%s: corrupt KL-divergence base file (vocabulary %u, window %u, %u windows)",
                 path.c_str(), header.n_vocab, header.n_ctx, header.n_chunks);
  }
  if (BaseFileBytes(header) != uint64_t(info.st_size)) {
    return Error("%s: %llu bytes, but its header describes %llu (truncated or corrupt)",
                 path.c_str(), (unsigned long long)info.st_size,
                 (unsigned long long)BaseFileBytes(header));
  }
  reader.plan_ = {.n_ctx = header.n_ctx, .n_chunks = header.n_chunks, .first = header.n_ctx / 2};
  reader.tokens_.resize(size_t(header.n_chunks) * header.n_ctx);
  if (std::fread(reader.tokens_.data(), 4, reader.tokens_.size(), reader.file_) !=
      reader.tokens_.size()) {
    return Error("%s: read failed", path.c_str());
  }
  for (const int32_t token : reader.tokens_) {
    if (token < 0 || uint32_t(token) >= header.n_vocab) {
      return Error("%s: corrupt KL-divergence base file (token %d outside the vocabulary of %u)",
                   path.c_str(), token, header.n_vocab);
    }
  }
  reader.records_left_ = reader.plan_.scored();
  reader.record_.resize(RecordBytes(header.n_vocab));
  return reader;
}

KldBaseReader::KldBaseReader(KldBaseReader&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)),
      header_(other.header_),
      plan_(other.plan_),
      tokens_(std::move(other.tokens_)),
      records_left_(other.records_left_),
      record_(std::move(other.record_)) {}

KldBaseReader::~KldBaseReader() {
  if (file_) std::fclose(file_);
}

Status KldBaseReader::Next(KldBaseRecord* record) {
  if (records_left_ == 0) return Error("%s: no positions left", path_.c_str());
  if (std::fread(record_.data(), 1, record_.size(), file_) != record_.size()) {
    return Error("%s: read failed", path_.c_str());
  }
  --records_left_;
  record->target_log_prob = Get<float>(record_.data());
  record->argmax = Get<int32_t>(record_.data() + 4);
  const double low = Get<float>(record_.data() + 8);
  if (record->argmax < 0 || uint32_t(record->argmax) >= header_.n_vocab || !(low <= 0) ||
      !std::isfinite(low) ||
      !std::isfinite(record->target_log_prob) || record->target_log_prob > 0) {
    return Error(
        "%s: corrupt KL-divergence base file (a position with argmax %d, lowest "
        "log-probability %g)",
        path_.c_str(), record->argmax, low);
  }
  record->log_probs.resize(header_.n_vocab);
  // Decoded, then renormalised: rounding each code moves the total mass by up to ~step/2.
  double sum = 0;
  for (size_t i = 0; i < header_.n_vocab; ++i) {
    const double code = Get<uint16_t>(record_.data() + 12 + 2 * i);
    const double log_prob = low * (1.0 - code / kCodeMax);
    record->log_probs[i] = float(log_prob);
    sum += std::exp(log_prob);
  }
  // A row whose probabilities all underflow (a huge |low| and no code near the top) has no
  // distribution to renormalise; a row written by petrel always holds its most likely token,
  // whose probability is at least 1 / n_vocab.
  if (!(sum > 0) || !std::isfinite(sum)) {
    return Error("%s: corrupt KL-divergence base file (a position whose probabilities sum to %g)",
                 path_.c_str(), sum);
  }
  const float shift = float(std::log(sum));
  for (float& log_prob : record->log_probs) log_prob -= shift;
  return Status::Ok();
}

}  // namespace petrel
