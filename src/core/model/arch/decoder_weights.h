// The weight shapes and rows the decoder families share, defined once so that a family's file
// names only what is its own. Everything here is a constant expression (inline functions taken
// by address, constexpr rows), so the families' tables stay constant-initialised.
#pragma once

#include "core/model/architecture.h"

namespace petrel::decoder_weights {

using Config = const ModelConfig&;
inline WeightShape Dim(Config c) { return {c.dim, 1}; }
inline WeightShape HeadDim(Config c) { return {c.head_dim, 1}; }
inline WeightShape QDim(Config c) { return {c.q_dim(), 1}; }
inline WeightShape KvDim(Config c) { return {c.kv_dim(), 1}; }
inline WeightShape DimToQ(Config c) { return {c.dim, c.q_dim()}; }
inline WeightShape DimToKv(Config c) { return {c.dim, c.kv_dim()}; }
inline WeightShape QToDim(Config c) { return {c.q_dim(), c.dim}; }
inline WeightShape DimToFfn(Config c) { return {c.dim, c.ffn_dim}; }
inline WeightShape FfnToDim(Config c) { return {c.ffn_dim, c.dim}; }
inline WeightShape DimToVocab(Config c) { return {c.dim, c.n_vocab}; }
inline WeightShape DimToExperts(Config c) { return {c.dim, c.n_experts}; }
inline WeightShape DimToExpertFfn(Config c) { return {c.dim, c.expert_ffn_dim}; }
inline WeightShape ExpertFfnToDim(Config c) { return {c.expert_ffn_dim, c.dim}; }
inline bool Untied(Config c) { return !c.tied_embeddings; }

constexpr WeightKind kMatrix = WeightKind::kMatrix;
constexpr WeightKind kVector = WeightKind::kVector;
constexpr WeightKind kExperts = WeightKind::kExperts;

// The weights outside the blocks, named alike by every Llama-descended checkpoint. The head is
// absent when the config ties it to the embeddings.
inline constexpr WeightSpec kTokenEmbd = {"token_embd.weight", "model.embed_tokens.weight",
                                          kMatrix, &DimToVocab};
inline constexpr WeightSpec kOutputNorm = {"output_norm.weight", "model.norm.weight", kVector,
                                           &Dim};
inline constexpr WeightSpec kOutput = {"output.weight", "lm_head.weight", kMatrix, &DimToVocab,
                                       &Untied};

}  // namespace petrel::decoder_weights
