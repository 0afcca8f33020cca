// ChatPrompt: template lookup, rendering with bos/eos variables, tokenization.
#include "core/chat/chat_prompt.h"

#include <fstream>
#include <sstream>

#include "core/chat/model_template.h"
#include "core/chat/user_text.h"
#include "core/tokenizer/tokenizer.h"

namespace petrel {

Result<ChatPrompt> ChatPrompt::Load(const std::string& path) {
  PETREL_ASSIGN_OR_RETURN(ModelChatTemplate found, LoadModelChatTemplate(path));
  if (found.source.empty()) {
    return Error("%s: the model has no chat template; give one with --chat-template-file FILE",
                 path.c_str());
  }
  auto chat = FromSource(found.source, found.bos_token, found.eos_token);
  if (!chat.ok()) return chat.status().Wrap(path + ": chat template");
  return chat;
}

Result<ChatPrompt> ChatPrompt::LoadFile(const std::string& template_path) {
  std::ifstream in(template_path, std::ios::binary);
  if (!in) return Error("%s: cannot open", template_path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  auto chat = FromSource(text.str(), "", "");
  if (!chat.ok()) return chat.status().Wrap(template_path);
  return chat;
}

Result<ChatPrompt> ChatPrompt::FromSource(const std::string& source, std::string bos,
                                          std::string eos) {
  PETREL_ASSIGN_OR_RETURN(ChatTemplate parsed, ChatTemplate::Parse(source));
  return ChatPrompt(std::move(parsed), source, std::move(bos), std::move(eos));
}

Result<std::string> ChatPrompt::Render(const nlohmann::ordered_json& messages,
                                       bool add_generation_prompt,
                                       const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json context = extra.is_object() ? extra : nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_;
  context["eos_token"] = eos_;
  return template_.Render(context);
}

Result<std::vector<int32_t>> ChatPrompt::Tokenize(const Tokenizer& tokenizer,
                                                  const nlohmann::ordered_json& messages,
                                                  bool add_generation_prompt,
                                                  const nlohmann::ordered_json& extra) const {
  // Special-token spellings in what users wrote stay text (core/chat/user_text.h).
  const std::vector<std::string> specials = SpecialTexts(tokenizer);
  nlohmann::ordered_json marked_messages = messages;
  nlohmann::ordered_json marked_extra = extra;
  const UserTextMarkers markers = ChooseMarkers({&messages, &extra});
  bool marked = MarkSpecialTexts(&marked_messages, specials, markers);
  marked = MarkSpecialTexts(&marked_extra, specials, markers) || marked;
  PETREL_ASSIGN_OR_RETURN(std::string text,
                          Render(marked ? marked_messages : messages, add_generation_prompt,
                                 marked ? marked_extra : extra));
  EncodeOptions options;
  options.parse_special = true;  // the template writes the control tokens as text
  if (marked) options.plain_spans = TakeMarkedSpans(&text, markers);
  options.add_special = bos_.empty() || text.rfind(bos_, 0) != 0;
  return tokenizer.Encode(text, options);
}

}  // namespace petrel
