// /tokenize and /detokenize (llama.cpp's server routes), and the error body every route sends.
#include "core/tokenizer/tokenizer.h"
#include "server/handlers.h"
#include "server/json_fields.h"

namespace petrel::server {
namespace {

using json = nlohmann::ordered_json;

// Parses `body` as an object with only `allowed` fields.
ApiResult ParseObject(const std::string& body, std::initializer_list<const char*> allowed,
                      json* out) {
  PETREL_RETURN_IF_API_ERROR(CheckJsonDepth(body));
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "",
                    "invalid_json"};
  }
  for (const auto& [name, value] : out->items()) {
    bool known = false;
    for (const char* field : allowed) known = known || name == field;
    if (!known) {
      return InvalidField(name, "'" + name + "' is not supported by this server",
                          "unsupported_parameter");
    }
  }
  return std::nullopt;
}

void SendJson(httplib::Response& res, const json& body) {
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace

void SendError(httplib::Response& res, const ApiError& error, ErrorShape shape) {
  res.status = error.status;
  res.set_content(ErrorJson(error, shape), "application/json");
}

void HandleTokenize(const ServingModel& model, const httplib::Request& req,
                    httplib::Response& res) {
  json request;
  if (ApiResult error = ParseObject(req.body, {"content", "add_special"}, &request)) {
    SendError(res, *error);
    return;
  }
  const FieldReader fields(request);
  if (!fields.Find("content")) {
    SendError(res, InvalidField("content", "'content' is required", "missing_required_parameter"));
    return;
  }
  std::string content;
  bool add_special = false;
  ApiResult error = fields.String("content", size_t(64) << 20, &content);
  if (!error) error = fields.Boolean("add_special", &add_special);
  if (error) {
    SendError(res, *error);
    return;
  }
  EncodeOptions encode;
  encode.add_special = add_special;
  SendJson(res, json{{"tokens", model.engine->tokenizer()->Encode(content, encode)}});
}

void HandleDetokenize(const ServingModel& model, const httplib::Request& req,
                      httplib::Response& res) {
  json request;
  if (ApiResult error = ParseObject(req.body, {"tokens"}, &request)) {
    SendError(res, *error);
    return;
  }
  const json* tokens = FieldReader(request).Find("tokens");
  if (!tokens || !tokens->is_array()) {
    SendError(res,
              InvalidField("tokens", "'tokens' must be an array of token ids", "invalid_type"));
    return;
  }
  const size_t n_vocab = size_t(model.engine->config().n_vocab);
  std::vector<int32_t> ids;
  for (const json& id : *tokens) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= int64_t(n_vocab)) {
      SendError(res, InvalidField("tokens", "'tokens' holds " + id.dump() +
                                                ", not a token id of this model (0 to " +
                                                std::to_string(n_vocab - 1) + ")"));
      return;
    }
    ids.push_back(int32_t(id.get<int64_t>()));
  }
  SendJson(res, json{{"content", model.engine->tokenizer()->Decode(ids, /*skip_special=*/false)}});
}

}  // namespace petrel::server
