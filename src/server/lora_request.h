// Per-request LoRA: the `lora` field of a completion request (which of `serve --lora`'s adapters
// apply, at what scale) and the GET /lora-adapters listing, both in llama-server's shapes.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/model/lora_adapter.h"  // LoraFile
#include "server/api_error.h"
#include "server/json_fields.h"  // ApiResult

namespace petrel::server {

// `lora`: an array of {"id": N} or {"name": "..."}, each with an optional "scale" (a finite
// number; default the adapter's --lora scale). As llama-server: the adapters listed apply, the
// others do not. Absent or null: every adapter at its --lora scale (`scales` left empty).
// Otherwise `scales` gets one entry per adapter of `adapters`. A 400 names the bad entry's field.
ApiResult ReadLoraField(const nlohmann::ordered_json& request, std::span<const LoraFile> adapters,
                        std::vector<float>* scales);

// [{"id", "name", "path", "scale"}, ...]: the adapters requests can pick, scale as loaded.
nlohmann::json LoraAdaptersJson(std::span<const LoraFile> adapters);

}  // namespace petrel::server
