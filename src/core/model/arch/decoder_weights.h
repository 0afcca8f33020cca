// The weight shapes and rows the decoder families share, defined once so that a family's file
// names only what is its own. Everything here is a constant expression, so the families' tables
// stay constant-initialised; the functions and rows have internal linkage (static, constexpr)
// because GCC under ASan/UBSan cannot fold an external function's address into the tables'
// static_asserts.
#pragma once

#include "core/model/architecture.h"

namespace petrel::decoder_weights {

using Config = const ModelConfig&;
static inline WeightShape Dim(Config c) { return {c.dim, 1}; }
static inline WeightShape HeadDim(Config c) { return {c.head_dim, 1}; }
static inline WeightShape QDim(Config c) { return {c.q_dim(), 1}; }
static inline WeightShape KvDim(Config c) { return {c.kv_dim(), 1}; }
static inline WeightShape DimToQ(Config c) { return {c.dim, c.q_dim()}; }
static inline WeightShape DimToKv(Config c) { return {c.dim, c.kv_dim()}; }
static inline WeightShape QToDim(Config c) { return {c.q_dim(), c.dim}; }
static inline WeightShape DimToFfn(Config c) { return {c.dim, c.ffn_dim}; }
static inline WeightShape FfnToDim(Config c) { return {c.ffn_dim, c.dim}; }
static inline WeightShape DimToVocab(Config c) { return {c.dim, c.n_vocab}; }
static inline WeightShape DimToExperts(Config c) { return {c.dim, c.n_experts}; }
static inline WeightShape DimToExpertFfn(Config c) { return {c.dim, c.expert_ffn_dim}; }
static inline WeightShape ExpertFfnToDim(Config c) { return {c.expert_ffn_dim, c.dim}; }
static inline bool Untied(Config c) { return !c.tied_embeddings; }

constexpr WeightKind kMatrix = WeightKind::kMatrix;
constexpr WeightKind kVector = WeightKind::kVector;
constexpr WeightKind kExperts = WeightKind::kExperts;

// The weights outside the blocks, named alike by every Llama-descended checkpoint. The head is
// absent when the config ties it to the embeddings.
constexpr WeightSpec kTokenEmbd = {"token_embd.weight", "model.embed_tokens.weight",
                                          kMatrix, &DimToVocab};
constexpr WeightSpec kOutputNorm = {"output_norm.weight", "model.norm.weight", kVector,
                                           &Dim};
constexpr WeightSpec kOutput = {"output.weight", "lm_head.weight", kMatrix, &DimToVocab,
                                       &Untied};

}  // namespace petrel::decoder_weights
