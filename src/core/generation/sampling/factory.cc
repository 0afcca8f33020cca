// SamplerChain: building the chain from parameters or a request, and running it.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/generation/sampling/log_sum_exp.h"
#include "core/generation/sampling/sampler.h"
#include "core/generation/sampling/sampling_fields.h"

namespace petrel {

std::vector<std::string> DefaultSamplerOrder() {
  return {"penalties", "dry",   "top_n_sigma", "top_k",      "typical_p",
          "top_p",     "min_p", "xtc",         "temperature"};
}

std::vector<std::string> KnownSamplerStages() {
  return {"logit_bias", "penalties", "dry", "top_n_sigma", "top_k", "typical_p", "top_p", "min_p", "xtc",
          "temperature", "mirostat_v2", "dist", "greedy"};
}

Result<std::vector<std::string>> ParseSamplerOrder(std::string_view text) {
  std::vector<std::string> order;
  std::string current;
  auto flush = [&]() -> Status {
    if (current.empty()) return Status::Ok();
    // Accept llama.cpp's short aliases too.
    if (current == "typ_p" || current == "typical") current = "typical_p";
    if (current == "temp") current = "temperature";
    const auto known = DefaultSamplerOrder();
    if (std::find(known.begin(), known.end(), current) == known.end()) {
      return Error(
          "unknown sampler '%s' (known: penalties, dry, top_n_sigma, top_k, typical_p, top_p, "
          "min_p, xtc, temperature)",
          current.c_str());
    }
    order.push_back(current);
    current.clear();
    return Status::Ok();
  };
  for (char ch : text) {
    if (ch == ';' || ch == ',' || ch == ' ') {
      PETREL_RETURN_IF_ERROR(flush());
    } else {
      current += ch;
    }
  }
  PETREL_RETURN_IF_ERROR(flush());
  return order;
}

Result<std::unique_ptr<SamplerChain>> SamplerChain::Create(const SamplingParams& p) {
  // The ranges are those of the CLI flags and the server's request fields (sampling_fields.h).
  PETREL_RETURN_IF_ERROR(CheckSamplingParams(p));
  if (p.n_probs < 0 || p.n_probs > 100) return Error("n_probs must be in [0, 100]");
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0) return Error("logit_bias: token id %d is negative", token);
    if (std::isnan(bias)) return Error("logit_bias: bias of token %d is not a number", token);
  }

  std::unique_ptr<SamplerChain> chain(new SamplerChain());
  chain->params_ = p;
  chain->context_.rng.seed(p.seed);
  auto& stages = chain->stages_;
  stages.push_back(MakeLogitBias(p.logit_bias));
  const std::vector<std::string> order = p.order.empty() ? DefaultSamplerOrder() : p.order;
  const bool greedy = p.temperature <= 0.0f && p.mirostat == 0;
  for (const std::string& name : order) {
    if (name == "penalties") {
      stages.push_back(MakePenalties(p.repeat_penalty, p.frequency_penalty, p.presence_penalty, p.penalty_last_n));
    } else if (name == "dry") {
      stages.push_back(MakeDry(p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n,
                               p.dry_sequence_breakers));
    } else if (greedy || p.mirostat == 2) {
      // Truncation and temperature do not change an argmax, and mirostat does its own
      // truncation; both skip them (as llama.cpp does).
      if (p.mirostat == 2 && name == "temperature") {
        stages.push_back(MakeTemperature(p.temperature, 0.0f, 1.0f));
      }
    } else if (name == "top_k") {
      stages.push_back(MakeTopK(p.top_k));
    } else if (name == "top_n_sigma") {
      stages.push_back(MakeTopNSigma(p.top_n_sigma));
    } else if (name == "typical_p") {
      stages.push_back(MakeTypicalP(p.typical_p));
    } else if (name == "top_p") {
      stages.push_back(MakeTopP(p.top_p));
    } else if (name == "min_p") {
      stages.push_back(MakeMinP(p.min_p));
    } else if (name == "xtc") {
      stages.push_back(MakeXtc(p.xtc_probability, p.xtc_threshold));
    } else if (name == "temperature") {
      stages.push_back(MakeTemperature(p.temperature, p.dynatemp_range, p.dynatemp_exponent));
    } else {
      return Error("unknown sampler '%s'", name.c_str());
    }
  }
  if (greedy) {
    stages.push_back(MakeGreedy());
  } else if (p.mirostat == 2) {
    stages.push_back(MakeMirostatV2(p.mirostat_tau, p.mirostat_eta));
  } else {
    stages.push_back(MakeDist());
  }
  return chain;
}

void SamplerChain::SetTokenText(std::function<std::string_view(int32_t)> token_text) {
  context_.token_text = std::move(token_text);
}

void SamplerChain::SetConstraint(std::unique_ptr<SamplerStage> stage) {
  // stages_[0] is always the logit bias (Create).
  stages_.insert(stages_.begin() + 1, std::move(stage));
}

void SamplerChain::AddHistory(const std::vector<int32_t>& tokens) {
  context_.history.insert(context_.history.end(), tokens.begin(), tokens.end());
}

void SamplerChain::Accept(int32_t token) {
  context_.history.push_back(token);
  for (auto& stage : stages_) stage->Accept(token);
}

std::vector<std::string> SamplerChain::StageNames() const {
  std::vector<std::string> names;
  for (const auto& stage : stages_) names.push_back(stage->Name());
  return names;
}

SampleResult SamplerChain::Sample(const float* logits, size_t n_vocab) {
  // A greedy chain whose other stages change nothing picks the raw argmax: the token
  // Candidates::Best would find in untouched candidates (the first of the largest logits),
  // without copying the vocabulary into them (a third of a 32-stream server's sampling).
  if (stages_.back()->PicksArgMax() &&
      std::all_of(stages_.begin(), stages_.end() - 1, [](const auto& s) { return s->Inert(); })) {
    return Chosen(logits, n_vocab, ArgMax(logits, n_vocab));
  }
  candidates_.Reset(logits, n_vocab);
  int32_t chosen = -1;
  for (auto& stage : stages_) {
    stage->Apply(candidates_, context_);
    chosen = stage->Select(candidates_, context_);
    if (chosen >= 0) break;
  }
  return Chosen(logits, n_vocab, chosen);
}

SampleResult SamplerChain::SampleDraft(const float* logits, size_t n_vocab, int32_t draft,
                                       std::span<const float> draft_probs, bool* accepted) {
  // Only the seeded draw has a distribution to compare the draft's with; greedy and mirostat
  // choose as always, and a draft equal to their choice stands (for mirostat, a draw from p
  // that keeps the draft when they agree is still a draw from p).
  if (std::string_view(stages_.back()->Name()) != "dist") {
    SampleResult result = Sample(logits, n_vocab);
    *accepted = result.id == draft;
    return result;
  }
  candidates_.Reset(logits, n_vocab);
  for (auto& stage : stages_) stage->Apply(candidates_, context_);
  candidates_.Softmax();
  double total = 0.0;
  double p_draft = 0.0;
  for (const Candidate& item : candidates_.items) {
    total += item.prob;
    if (item.id == draft) p_draft = item.prob;
  }
  p_draft /= total;
  auto q = [&](int32_t id) -> double {
    if (draft_probs.empty()) return id == draft ? 1.0 : 0.0;
    return size_t(id) < draft_probs.size() ? double(draft_probs[size_t(id)]) : 0.0;
  };
  const double q_draft = draft >= 0 ? q(draft) : 0.0;
  const double u = context_.Uniform();
  if (q_draft > 0.0 && u * q_draft < p_draft) {
    *accepted = true;
    return Chosen(logits, n_vocab, draft);
  }
  *accepted = false;
  // Rejected: draw from max(0, p - q). Where rounding leaves no residual mass (p and q equal
  // to the last bit), p itself is what remains.
  double residual = 0.0;
  for (const Candidate& item : candidates_.items) {
    residual += std::max(0.0, double(item.prob) / total - q(item.id));
  }
  const bool plain = !(residual > 1e-12);
  const double target = context_.Uniform() * (plain ? 1.0 : residual);
  double acc = 0.0;
  int32_t chosen = candidates_.items.back().id;
  for (const Candidate& item : candidates_.items) {
    const double p = double(item.prob) / total;
    acc += plain ? p : std::max(0.0, p - q(item.id));
    if (target < acc) {
      chosen = item.id;
      break;
    }
  }
  return Chosen(logits, n_vocab, chosen);
}

SampleResult SamplerChain::Chosen(const float* logits, size_t n_vocab, int32_t chosen) {
  SampleResult result;
  result.id = chosen;
  // Log-probabilities under the full softmax of the raw logits (OpenAI's `logprobs`).
  const double log_z = LogSumExp(logits, n_vocab);
  if (chosen >= 0) result.logprob = float(double(logits[chosen]) - log_z);
  if (params_.n_probs > 0) {
    const size_t n = std::min(n_vocab, size_t(params_.n_probs));
    std::vector<int32_t> ids(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) ids[i] = int32_t(i);
    std::partial_sort(ids.begin(), ids.begin() + long(n), ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < n; ++i) result.top.push_back({ids[i], float(double(logits[ids[i]]) - log_z)});
  }
  if (chosen >= 0) Accept(chosen);
  return result;
}

Status SamplingParamsFromJson(const nlohmann::json& request, SamplingParams* p) {
  if (!request.is_object()) return Error("request must be a JSON object");
  auto integer = [&](const char* field, int32_t* out) -> Status {
    auto it = request.find(field);
    if (it == request.end() || it->is_null()) return Status::Ok();
    if (!it->is_number_integer()) return Error("field '%s' must be an integer", field);
    const int64_t value = it->get<int64_t>();
    if (value < INT32_MIN || value > INT32_MAX) return Error("field '%s' is out of range", field);
    *out = int32_t(value);
    return Status::Ok();
  };
  for (const SamplingField& field : SamplingFields()) {
    auto it = request.find(field.name);
    if (it == request.end() || it->is_null()) continue;
    if (!it->is_number()) return Error("field '%s' must be a number", field.name);
    const double value = it->get<double>();
    PETREL_RETURN_IF_ERROR(CheckSamplingValue(field, value));
    SetSamplingValue(field, value, p);
  }
  PETREL_RETURN_IF_ERROR(integer("n_probs", &p->n_probs));
  if (auto it = request.find("top_logprobs"); it != request.end() && !it->is_null()) {
    PETREL_RETURN_IF_ERROR(integer("top_logprobs", &p->n_probs));
  }
  if (auto it = request.find("seed"); it != request.end() && !it->is_null()) {
    if (!it->is_number_integer()) return Error("field 'seed' must be an integer");
    p->seed = it->is_number_unsigned() ? it->get<uint64_t>() : uint64_t(it->get<int64_t>());
  }
  if (auto it = request.find("dry_sequence_breakers"); it != request.end() && !it->is_null()) {
    if (!it->is_array()) return Error("field 'dry_sequence_breakers' must be an array of strings");
    p->dry_sequence_breakers.clear();
    for (const auto& breaker : *it) {
      if (!breaker.is_string()) return Error("field 'dry_sequence_breakers' must be an array of strings");
      p->dry_sequence_breakers.push_back(breaker.get<std::string>());
    }
  }
  if (auto it = request.find("samplers"); it != request.end() && !it->is_null()) {
    std::string joined;
    if (it->is_string()) {
      joined = it->get<std::string>();
    } else if (it->is_array()) {
      for (const auto& name : *it) {
        if (!name.is_string()) return Error("field 'samplers' must be a list of names");
        joined += name.get<std::string>() + ";";
      }
    } else {
      return Error("field 'samplers' must be a string or a list of names");
    }
    PETREL_ASSIGN_OR_RETURN(p->order, ParseSamplerOrder(joined));
  }
  if (auto it = request.find("logit_bias"); it != request.end() && !it->is_null()) {
    // OpenAI form {"123": -100} or llama.cpp form [[123, -100], [456, false]].
    auto add = [&](int64_t token, const nlohmann::json& bias) -> Status {
      if (token < 0 || token > INT32_MAX) return Error("logit_bias: token id %lld is invalid", (long long)token);
      if (bias.is_boolean()) {
        if (!bias.get<bool>()) p->logit_bias[int32_t(token)] = -INFINITY;
      } else if (bias.is_number()) {
        p->logit_bias[int32_t(token)] = bias.get<float>();
      } else {
        return Error("logit_bias: bias of token %lld must be a number or false", (long long)token);
      }
      return Status::Ok();
    };
    if (it->is_object()) {
      for (const auto& [key, bias] : it->items()) {
        char* end = nullptr;
        const long long token = std::strtoll(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0') return Error("logit_bias: key '%s' is not a token id", key.c_str());
        PETREL_RETURN_IF_ERROR(add(token, bias));
      }
    } else if (it->is_array()) {
      for (const auto& pair : *it) {
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer()) {
          return Error("logit_bias: entries must be [token_id, bias] pairs");
        }
        PETREL_RETURN_IF_ERROR(add(pair[0].get<int64_t>(), pair[1]));
      }
    } else {
      return Error("field 'logit_bias' must be an object or an array of pairs");
    }
  }
  return Status::Ok();
}

}  // namespace petrel
