// POST /v1/embeddings: OpenAI's request (input as a string, strings, token ids or lists of
// them; encoding_format float or base64; dimensions only as the model's own), run on the
// scheduler thread through Embed, answered in OpenAI's list shape with the tokens counted.
#include <string>
#include <vector>

#include "core/generation/embedding.h"
#include "core/tokenizer/tokenizer.h"
#include "server/handlers.h"
#include "server/json_fields.h"

namespace petrel::server {
namespace {

using json = nlohmann::ordered_json;

// OpenAI's own limit on inputs per request.
constexpr size_t kMaxInputs = 2048;

std::string Base64(const void* data, size_t n) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t chunk = uint32_t(bytes[i]) << 16 |
                           (i + 1 < n ? uint32_t(bytes[i + 1]) << 8 : 0) |
                           (i + 2 < n ? uint32_t(bytes[i + 2]) : 0);
    out += kAlphabet[chunk >> 18 & 63];
    out += kAlphabet[chunk >> 12 & 63];
    out += i + 1 < n ? kAlphabet[chunk >> 6 & 63] : '=';
    out += i + 2 < n ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

// One input's token ids from a JSON array of integers; `where` names it in messages.
ApiResult TokenInput(const json& array, const std::string& where, int64_t n_vocab,
                     std::vector<int32_t>* out) {
  for (const json& id : array) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_vocab) {
      return InvalidField("input", where + " holds " + id.dump() +
                                       ", not a token id of this model (0 to " +
                                       std::to_string(n_vocab - 1) + ")");
    }
    out->push_back(int32_t(id.get<int64_t>()));
  }
  return std::nullopt;
}

// The request's inputs as token ids, in order.
ApiResult ReadInputs(const json& input, const Engine& engine,
                     std::vector<std::vector<int32_t>>* inputs) {
  const int64_t n_vocab = engine.config().n_vocab;
  const Tokenizer& tokenizer = *engine.tokenizer();
  auto add_text = [&](const json& text, const std::string& where) -> ApiResult {
    if (text.get_ref<const std::string&>().empty()) {
      return InvalidField("input", where + " is an empty string");
    }
    inputs->push_back(tokenizer.Encode(text.get_ref<const std::string&>()));
    return std::nullopt;
  };
  if (input.is_string()) return add_text(input, "'input'");
  if (!input.is_array()) {
    return InvalidField("input",
                        std::string("'input' must be a string, an array of strings, an array of "
                                    "token ids or an array of such arrays, not ") +
                            JsonTypeName(input),
                        "invalid_type");
  }
  if (input.empty()) return InvalidField("input", "'input' is an empty array");
  if (input[0].is_number()) {  // one input of token ids
    inputs->emplace_back();
    return TokenInput(input, "'input'", n_vocab, &inputs->back());
  }
  if (input.size() > kMaxInputs) {
    return InvalidField("input", "'input' holds " + std::to_string(input.size()) +
                                     " inputs; at most " + std::to_string(kMaxInputs) +
                                     " per request");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = "'input[" + std::to_string(i) + "]'";
    if (item.is_string()) {
      PETREL_RETURN_IF_API_ERROR(add_text(item, where));
    } else if (item.is_array()) {
      if (item.empty()) return InvalidField("input", where + " is an empty array");
      inputs->emplace_back();
      PETREL_RETURN_IF_API_ERROR(TokenInput(item, where, n_vocab, &inputs->back()));
    } else {
      return InvalidField("input",
                          where + " must be a string or an array of token ids, not " +
                              std::string(JsonTypeName(item)),
                          "invalid_type");
    }
  }
  return std::nullopt;
}

}  // namespace

void HandleEmbeddings(const ServingModel& model, const std::string& model_name,
                      const httplib::Request& req, httplib::Response& res) {
  if (!model.embeddings) {
    SendError(res, StatusError(400,
                               "this server does not serve embeddings; start it with --embeddings "
                               "(or serve an embedding model)"));
    return;
  }
  if (ApiResult deep = CheckJsonDepth(req.body)) {
    SendError(res, *deep);
    return;
  }
  json request = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.is_object()) {
    SendError(res, ApiError{400, "the request body must be a JSON object", "invalid_request_error",
                            "", "invalid_json"});
    return;
  }
  for (const auto& [name, value] : request.items()) {
    if (name != "input" && name != "model" && name != "encoding_format" && name != "dimensions" &&
        name != "user") {
      SendError(res, InvalidField(name, "'" + name + "' is not supported by this server",
                                  "unsupported_parameter"));
      return;
    }
  }
  const FieldReader fields(request);
  const json* input = fields.Find("input");
  if (!input) {
    SendError(res, InvalidField("input", "'input' is required", "missing_required_parameter"));
    return;
  }
  std::string encoding = "float";
  if (ApiResult error = fields.String("encoding_format", 16, &encoding)) {
    SendError(res, *error);
    return;
  }
  if (encoding != "float" && encoding != "base64") {
    SendError(res, InvalidField("encoding_format",
                                "'encoding_format' must be \"float\" or \"base64\", not \"" +
                                    encoding + "\""));
    return;
  }
  Engine& engine = *model.engine;
  const int64_t dim = engine.config().dim;
  int64_t dimensions = dim;
  if (ApiResult error = fields.Integer("dimensions", 1, int64_t(1) << 30, &dimensions)) {
    SendError(res, *error);
    return;
  }
  if (dimensions != dim) {
    // Truncating is only meaningful for models trained for it, which do not say so.
    SendError(res,
              InvalidField("dimensions", "this model's embeddings have " + std::to_string(dim) +
                                             " dimensions and cannot be shortened to " +
                                             std::to_string(dimensions)));
    return;
  }
  std::vector<std::vector<int32_t>> inputs;
  if (ApiResult error = ReadInputs(*input, engine, &inputs)) {
    SendError(res, *error);
    return;
  }
  // Checked here to answer 400 naming the input; Embed checks the same again.
  const size_t context = engine.context();
  const bool whole_pass = !engine.config().causal_attention;
  const size_t pass = std::min(engine.options().max_batch_tokens, engine.options().ubatch_tokens);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const size_t limit = whole_pass ? std::min(context, pass) : context;
    if (inputs[i].empty()) {
      SendError(res, InvalidField("input", "input " + std::to_string(i) + " has no tokens"));
      return;
    }
    if (inputs[i].size() > limit) {
      SendError(res, InvalidField("input",
                                  "input " + std::to_string(i) + " has " +
                                      std::to_string(inputs[i].size()) + " tokens, more than the " +
                                      std::to_string(limit) + " this server takes per input",
                                  "context_length_exceeded"));
      return;
    }
  }
  Result<Embeddings> embeddings = Error("not run");
  const bool ran = model.scheduler->RunBetweenSteps(
      [&](Engine& owned) { embeddings = Embed(owned, inputs, EmbedOptions{}); });
  if (!ran) {
    SendError(res, StatusError(503, "the server is shutting down"));
    return;
  }
  if (!embeddings.ok()) {
    SendError(res, StatusError(503, "the embeddings could not be computed: " +
                                        embeddings.status().message()));
    return;
  }
  json data = json::array();
  for (size_t i = 0; i < embeddings->vectors.size(); ++i) {
    const std::vector<float>& v = embeddings->vectors[i];
    json item = {{"object", "embedding"}, {"index", i}};
    if (encoding == "base64") {
      item["embedding"] = Base64(v.data(), v.size() * sizeof(float));
    } else {
      item["embedding"] = v;
    }
    data.push_back(std::move(item));
  }
  const json body = {
      {"object", "list"},
      {"data", std::move(data)},
      {"model", model_name},
      {"usage", {{"prompt_tokens", embeddings->tokens}, {"total_tokens", embeddings->tokens}}}};
  res.set_content(body.dump(), "application/json");
}

}  // namespace petrel::server
