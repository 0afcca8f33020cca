// ReadLoraField and LoraAdaptersJson: llama-server's `lora` request field and adapter listing.
#include "server/lora_request.h"

#include <cmath>
#include <string>

namespace petrel::server {

ApiResult ReadLoraField(const nlohmann::ordered_json& request, std::span<const LoraFile> adapters,
                        std::vector<float>* scales) {
  scales->clear();
  const auto field = request.find("lora");
  if (field == request.end() || field->is_null()) return std::nullopt;
  if (!field->is_array()) {
    return InvalidField("lora", "'lora' must be an array of {\"id\" or \"name\", \"scale\"}",
                        "invalid_type");
  }
  // Listed adapters apply; the others are off for this request.
  scales->assign(adapters.size(), 0.0f);
  std::vector<bool> listed(adapters.size(), false);
  for (size_t i = 0; i < field->size(); ++i) {
    const nlohmann::ordered_json& entry = (*field)[i];
    const std::string where = "lora[" + std::to_string(i) + "]";
    if (!entry.is_object()) {
      return InvalidField(where, "'" + where + "' must be an object", "invalid_type");
    }
    for (const auto& [key, value] : entry.items()) {
      if (key != "id" && key != "name" && key != "scale") {
        return InvalidField(where + "." + key, "'" + where + "." + key + "' is not supported",
                            "unsupported_parameter");
      }
    }
    const auto id = entry.find("id");
    const auto name = entry.find("name");
    if ((id == entry.end()) == (name == entry.end())) {
      return InvalidField(where, "'" + where + "' needs either 'id' or 'name'",
                          "missing_required_parameter");
    }
    size_t index = adapters.size();
    if (id != entry.end()) {
      if (!id->is_number_integer()) {
        return InvalidField(where + ".id", "'" + where + ".id' must be an integer", "invalid_type");
      }
      const int64_t value = id->get<int64_t>();
      if (value < 0 || uint64_t(value) >= adapters.size()) {
        return InvalidField(where + ".id", "'" + where + ".id': no LoRA adapter " +
                                               std::to_string(value) + " (the server has " +
                                               std::to_string(adapters.size()) +
                                               "; see GET /lora-adapters)");
      }
      index = size_t(value);
    } else {
      if (!name->is_string()) {
        return InvalidField(where + ".name", "'" + where + ".name' must be a string",
                            "invalid_type");
      }
      const std::string& wanted = name->get_ref<const std::string&>();
      for (size_t k = 0; k < adapters.size() && index == adapters.size(); ++k) {
        if (adapters[k].name == wanted) index = k;
      }
      if (index == adapters.size()) {
        return InvalidField(where + ".name", "'" + where + ".name': no LoRA adapter named '" +
                                                 wanted.substr(0, 128) +
                                                 "' (see GET /lora-adapters)");
      }
    }
    if (listed[index]) {
      return InvalidField(where, "'" + where + "': adapter " + std::to_string(index) + " ('" +
                                     adapters[index].name + "') is listed twice");
    }
    listed[index] = true;
    float scale = adapters[index].scale;
    if (const auto given = entry.find("scale"); given != entry.end()) {
      // JSON numbers past float's range become infinite: refused as well.
      if (!given->is_number() || !std::isfinite(given->get<double>()) ||
          !std::isfinite(float(given->get<double>()))) {
        return InvalidField(where + ".scale", "'" + where + ".scale' must be a finite number");
      }
      scale = float(given->get<double>());
    }
    (*scales)[index] = scale;
  }
  return std::nullopt;
}

nlohmann::json LoraAdaptersJson(std::span<const LoraFile> adapters) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t k = 0; k < adapters.size(); ++k) {
    list.push_back({{"id", k},
                    {"name", adapters[k].name},
                    {"path", adapters[k].path},
                    {"scale", adapters[k].scale}});
  }
  return list;
}

}  // namespace petrel::server
