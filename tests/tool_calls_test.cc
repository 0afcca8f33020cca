// Tool-call and reasoning parsers without a server: a table of replies per format (the call
// texts are those the real templates in ../shared/chat-templates render for the same calls),
// each parsed whole and streamed split at every byte; malformed calls stay text.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/reasoning.h"
#include "util/test_data.h"

namespace petrel::server {
namespace {

using json = nlohmann::json;

struct Case {
  const char* name;
  ToolCallFormat format;
  std::string reply;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments (compact JSON)
  std::string reasoning = "";                              // harmony's analysis channel
};

const std::string kParis = R"({"location":"Paris, France","unit":"celsius"})";
const std::string kLondon = R"({"location":"London, UK"})";

std::vector<Case> Cases() {
  return {
      {"hermes_one",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, "
       "France\", \"unit\": \"celsius\"}}\n</tool_call>",
       "",
       {{"get_current_weather", kParis}}},
      {"hermes_text_and_two",
       ToolCallFormat::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [1, \\\"}\\\"]}\"}\n"
       "</tool_call>\nDone.",
       "Let me check.Done.",
       {{"a", R"({"x":1})"}, {"b", R"({"y":[1,"}"]})"}}},
      {"hermes_malformed",
       ToolCallFormat::kHermes,
       "Hi <tool_call>{\"name\": \"a\", \"arguments\": {\"x\": </tool_call> there",
       "Hi <tool_call>{\"name\": \"a\", \"arguments\": {\"x\": </tool_call> there",
       {}},
      {"hermes_no_name",
       ToolCallFormat::kHermes,
       "<tool_call>{\"arguments\": {}}</tool_call>",
       "<tool_call>{\"arguments\": {}}</tool_call>",
       {}},
      {"hermes_never_closed_but_whole",
       ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}",
       "",
       {{"a", "{}"}}},
      {"hermes_never_closed_cut",
       ToolCallFormat::kHermes,
       "ok <tool_call>\n{\"name\": \"a\", \"ar",
       "ok <tool_call>\n{\"name\": \"a\", \"ar",
       {}},
      {"hermes_plain_text",
       ToolCallFormat::kHermes,
       "Just <tool text> and <tool_cal",
       "Just <tool text> and <tool_cal",
       {}},
      {"llama3_json",
       ToolCallFormat::kLlama3,
       "{\"name\": \"get_current_weather\", \"parameters\": {\"location\": \"Paris, France\", "
       "\"unit\": \"celsius\"}}",
       "",
       {{"get_current_weather", kParis}}},
      {"llama3_python_tag_two",
       ToolCallFormat::kLlama3,
       "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": "
       "{\"q\": \"x;y\"}}",
       "",
       {{"a", "{}"}, {"b", R"({"q":"x;y"})"}}},
      {"llama3_string_parameters",
       ToolCallFormat::kLlama3,
       "{\"name\": \"get_current_weather\", \"parameters\": \"{\\\"location\\\":\\\"London, "
       "UK\\\"}\"}",
       "",
       {{"get_current_weather", kLondon}}},
      {"llama3_text", ToolCallFormat::kLlama3, "The answer is {42}.", "The answer is {42}.", {}},
      {"llama3_malformed",
       ToolCallFormat::kLlama3,
       "{\"name\": \"a\", \"parameters\": {",
       "{\"name\": \"a\", \"parameters\": {",
       {}},
      {"llama3_json_then_text",
       ToolCallFormat::kLlama3,
       "{\"name\": \"a\"} and more",
       "{\"name\": \"a\"} and more",
       {}},
      {"mistral_nemo",
       ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, "
       "France\", \"unit\": \"celsius\"}, \"id\": \"a1b2c3d4e\"}]",
       "",
       {{"get_current_weather", kParis}}},
      {"mistral_small_args",
       ToolCallFormat::kMistral,
       "[TOOL_CALLS]get_current_weather[CALL_ID]a1b2c3d4e[ARGS]{\"location\": \"Paris, France\", "
       "\"unit\": \"celsius\"}",
       "",
       {{"get_current_weather", kParis}}},
      {"mistral_devstral_two",
       ToolCallFormat::kMistral,
       "Sure.[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{\"k\": [1]}",
       "Sure.",
       {{"a", "{}"}, {"b", R"({"k":[1]})"}}},
      {"mistral_bare_array",
       ToolCallFormat::kMistral,
       " [{\"name\": \"a\", \"arguments\": {\"x\": \"]\"}}]",
       "",
       {{"a", R"({"x":"]"})"}}},
      {"mistral_malformed",
       ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": 3}] ok",
       "[TOOL_CALLS][{\"name\": 3}] ok",
       {}},
      {"mistral_text", ToolCallFormat::kMistral, "[1, 2] are numbers", "[1, 2] are numbers", {}},
      {"generic_tool_calls",
       ToolCallFormat::kGeneric,
       "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", "
       "\"arguments\": {}}]}",
       "",
       {{"a", R"({"x":1})"}, {"b", "{}"}}},
      {"generic_tool_call",
       ToolCallFormat::kGeneric,
       "{\"tool_call\": {\"name\": \"a\", \"arguments\": {\"x\": 1}}}",
       "",
       {{"a", R"({"x":1})"}}},
      {"generic_bare",
       ToolCallFormat::kGeneric,
       "\n{\"name\": \"a\", \"arguments\": {}}\n",
       "",
       {{"a", "{}"}}},
      {"generic_response",
       ToolCallFormat::kGeneric,
       "{\"response\": \"hi\"}",
       "{\"response\": \"hi\"}",
       {}},
      {"generic_text", ToolCallFormat::kGeneric, "Hello {there}", "Hello {there}", {}},
      // Harmony: the prompt ended with "<|start|>assistant", so the first header has no start.
      {"harmony_analysis_then_call",
       ToolCallFormat::kHarmony,
       "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
       "commentary to=functions.get_current_weather <|constrain|>json<|message|>{\"location\": "
       "\"Paris, France\", \"unit\": \"celsius\"}<|call|>",
       "",
       {{"get_current_weather", kParis}},
       "Need the weather."},
      {"harmony_template_header_order",  // as the template renders a past call
       ToolCallFormat::kHarmony,
       "<|start|>assistant to=functions.get_current_weather<|channel|>commentary json<|message|>"
       "{\"location\": \"London, UK\"}<|call|>",
       "",
       {{"get_current_weather", kLondon}}},
      {"harmony_final",
       ToolCallFormat::kHarmony,
       "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final"
       "<|message|>It is 20 C.<|return|>",
       "It is 20 C.",
       {},
       "Simple."},
      {"harmony_call_marker_left_out",  // <|call|> is an end token the text may lack
       ToolCallFormat::kHarmony,
       "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>"
       "{\"location\": \"London, UK\"}",
       "",
       {{"get_current_weather", kLondon}}},
      {"harmony_preamble_and_two_calls",
       ToolCallFormat::kHarmony,
       "<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant<|channel|>"
       "commentary to=functions.a <|constrain|>json<|message|>{\"x\": 1}<|call|>"
       "<|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>"
       "\"{\\\"y\\\": 2}\"<|call|>",
       "Checking both.",
       {{"a", R"({"x":1})"}, {"b", R"({"y":2})"}}},
      {"harmony_call_never_closed",  // cut off inside the arguments: the text stays content
       ToolCallFormat::kHarmony,
       "<|channel|>analysis<|message|>Hmm<|end|><|start|>assistant<|channel|>commentary "
       "to=functions.a <|constrain|>json<|message|>{\"x\": ",
       "{\"x\": ",
       {},
       "Hmm"},
      {"harmony_analysis_never_closed",
       ToolCallFormat::kHarmony,
       "<|channel|>analysis<|message|>Still thinking <|en",
       "",
       {},
       "Still thinking <|en"},
      {"harmony_two_analyses_and_tool_output_imagined",
       ToolCallFormat::kHarmony,
       "<|channel|>analysis<|message|>One.<|end|><|start|>assistant<|channel|>analysis"
       "<|message|>Two.<|end|><|start|>functions.a to=assistant<|channel|>commentary<|message|>"
       "{}<|end|><|start|>assistant<|channel|>final<|message|>Done",
       "Done",
       {},
       "One.\nTwo."},
      {"harmony_plain_text", ToolCallFormat::kHarmony, "Hi <|there", "Hi <|there", {}},
      {"harmony_space_before_first_header",
       ToolCallFormat::kHarmony,
       "\n <|channel|>final<|message|>Yes.",
       "Yes.",
       {}},
      {"harmony_spaces_only", ToolCallFormat::kHarmony, " \n ", "", {}},
      {"harmony_header_cut_off", ToolCallFormat::kHarmony, "<|channel|>analy", "", {}},
      {"harmony_builtin_recipient_and_bad_name",
       ToolCallFormat::kHarmony,
       "<|channel|>commentary to=browser.search<|message|>{}<|call|><|start|>assistant"
       "<|channel|>commentary to=functions. <|constrain|>json<|message|>{}<|call|>",
       "{}",
       {}},
  };
}

std::string Compact(const std::string& text) { return json::parse(text).dump(); }

void ExpectResult(const Case& c, const std::string& content, const std::vector<ToolCall>& calls,
                  const std::string& how, const std::string& reasoning) {
  SCOPED_TRACE(std::string(c.name) + " " + how);
  EXPECT_EQ(content, c.content);
  EXPECT_EQ(reasoning, c.reasoning);
  ASSERT_EQ(calls.size(), c.calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].name, c.calls[i].first);
    EXPECT_EQ(Compact(calls[i].arguments), c.calls[i].second);
  }
}

TEST(ToolCallParse, WholeReplies) {
  for (const Case& c : Cases()) {
    const ParsedToolCalls parsed = ParseToolCalls(c.format, c.reply, /*final=*/true);
    ExpectResult(c, parsed.content, parsed.calls, "whole", parsed.reasoning);
    EXPECT_EQ(parsed.held, 0u);
  }
}

// Streamed in two pieces split at every byte, and byte by byte: the same result, and content
// sent never taken back.
TEST(ToolCallParse, StreamedSplitAtEveryByte) {
  for (const Case& c : Cases()) {
    for (size_t split = 0; split <= c.reply.size(); ++split) {
      ToolCallStream stream(c.format);
      std::string content, reasoning;
      std::vector<ToolCall> calls;
      auto take = [&](const ToolCallStream::Delta& delta) {
        content += delta.content;
        reasoning += delta.reasoning;
        EXPECT_EQ(delta.first_call_index, calls.size());
        calls.insert(calls.end(), delta.calls.begin(), delta.calls.end());
      };
      take(stream.Push(c.reply.substr(0, split)));
      take(stream.Push(c.reply.substr(split)));
      take(stream.Finish());
      ExpectResult(c, content, calls, "split at " + std::to_string(split), reasoning);
    }
    ToolCallStream stream(c.format);
    std::string content, reasoning;
    std::vector<ToolCall> calls;
    for (char byte : c.reply) {
      const auto delta = stream.Push(std::string(1, byte));
      content += delta.content;
      reasoning += delta.reasoning;
      calls.insert(calls.end(), delta.calls.begin(), delta.calls.end());
    }
    const auto delta = stream.Finish();
    content += delta.content;
    reasoning += delta.reasoning;
    calls.insert(calls.end(), delta.calls.begin(), delta.calls.end());
    ExpectResult(c, content, calls, "byte by byte", reasoning);
  }
}

// Text before a call streams before the call ends; a call streams as soon as it closes.
TEST(ToolCallParse, StreamsEarly) {
  ToolCallStream stream(ToolCallFormat::kHermes);
  EXPECT_EQ(stream.Push("Checking the weather").content, "Checking the weather");
  EXPECT_EQ(stream.Push(" <tool_").content, "");
  auto delta = stream.Push("call>{\"name\": \"a\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(delta.calls.size(), 1u);
  EXPECT_EQ(delta.calls[0].name, "a");
}

// Arbitrary bytes never crash a parser, whole or streamed.
TEST(ToolCallParse, HostileBytes) {
  const std::string pieces[] = {
      "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]",         "[CALL_ID]", "{", "}", "[",
      "]",           "\"",           "\\",           "<|python_tag|>", "name",      ":", ";", "\n",
      "<|start|>",   "<|channel|>",  "<|message|>",  "<|end|>",        "<|call|>",  " to=functions.x",
      "analysis",    "<|"};
  uint32_t state = 12345;
  for (int round = 0; round < 300; ++round) {
    std::string text;
    for (int i = 0; i < 20; ++i) {
      state = state * 1103515245 + 12345;
      text += pieces[(state >> 16) % std::size(pieces)];
    }
    for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3,
                                  ToolCallFormat::kMistral, ToolCallFormat::kGeneric,
                                  ToolCallFormat::kHarmony}) {
      ParseToolCalls(format, text, true);
      ToolCallStream stream(format);
      for (char byte : text) stream.Push(std::string(1, byte));
      stream.Finish();
    }
  }
}

// The call texts above are what the shipped templates render for an assistant's tool calls.
TEST(ToolCallParse, TemplatesRenderTheseCallTexts) {
  const std::string dir = testing::SharedDir() + "/chat-templates";
  std::ifstream in(dir + "/expected.jsonl");
  if (!in) GTEST_SKIP() << dir << " not found";
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"Qwen-Qwen3-0.6B",
       "<tool_call>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, "
       "France\", \"unit\": \"celsius\"}}\n</tool_call>"},
      {"meta-llama-Llama-3.1-8B-Instruct",
       "{\"name\": \"get_current_weather\", \"parameters\": {\"location\": \"Paris, France\", "
       "\"unit\": \"celsius\"}}"},
      {"mistralai-Mistral-Nemo-Instruct-2407",
       "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, "
       "France\", \"unit\": \"celsius\"}, \"id\": \"a1b2c3d4e\"}]"},
      {"Mistral-Small-3.2-24B-Instruct-2506",
       "[TOOL_CALLS]get_current_weather[CALL_ID]a1b2c3d4e[ARGS]{\"location\": \"Paris, France\", "
       "\"unit\": \"celsius\"}"},
  };
  std::map<std::string, bool> found;
  std::string line;
  while (std::getline(in, line)) {
    const json record = json::parse(line);
    if (record["conversation"] != "tool_call" || !record["output"].is_string()) continue;
    for (const auto& [name, text] : expected) {
      if (record["template"] == name &&
          record["output"].get<std::string>().find(text) != std::string::npos) {
        found[name] = true;
      }
    }
  }
  for (const auto& [name, text] : expected) EXPECT_TRUE(found[name]) << name;
}

TEST(ToolCallFormat, DetectedFromTemplates) {
  const std::string dir = testing::SharedDir() + "/chat-templates";
  auto read = [&](const std::string& name) {
    std::ifstream in(dir + "/" + name + ".jinja", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  if (read("Qwen-Qwen3-0.6B").empty()) GTEST_SKIP() << dir << " not found";
  const std::pair<const char*, ToolCallFormat> expected[] = {
      {"Qwen-Qwen3-0.6B", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506", ToolCallFormat::kMistral},
      {"unsloth-mistral-Devstral-Small-2507", ToolCallFormat::kMistral},
      {"google-gemma-2-2b-it", ToolCallFormat::kGeneric},
      {"openai-gpt-oss-120b", ToolCallFormat::kHarmony},
  };
  for (const auto& [name, format] : expected) {
    EXPECT_EQ(ToolCallFormatName(DetectToolCallFormat(read(name))), ToolCallFormatName(format))
        << name;
  }
  EXPECT_EQ(ToolCallFormatFromName("mistral"), ToolCallFormat::kMistral);
  EXPECT_EQ(ToolCallFormatFromName("harmony"), ToolCallFormat::kHarmony);
  EXPECT_FALSE(ToolCallFormatFromName("xml").has_value());
}

// Harmony without tools (calls stay content) and with reasoning_format "none" (the analysis is
// content too), whole and streamed.
TEST(ToolCallParse, HarmonyOptions) {
  const std::string reply =
      "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.a <|constrain|>json<|message|>{\"x\": 1}<|call|>";
  HarmonyOptions no_calls;
  no_calls.calls = false;
  ParsedToolCalls parsed = ParseToolCalls(ToolCallFormat::kHarmony, reply, true, no_calls);
  EXPECT_TRUE(parsed.calls.empty());
  EXPECT_EQ(parsed.content, "{\"x\": 1}");
  EXPECT_EQ(parsed.reasoning, "Think.");
  HarmonyOptions no_reasoning;
  no_reasoning.analysis_to_content = true;
  for (size_t split = 0; split <= reply.size(); ++split) {
    ToolCallStream stream(ToolCallFormat::kHarmony, no_reasoning);
    std::string content, reasoning;
    std::vector<ToolCall> calls;
    for (const auto& delta : {stream.Push(reply.substr(0, split)), stream.Push(reply.substr(split)),
                              stream.Finish()}) {
      content += delta.content;
      reasoning += delta.reasoning;
      calls.insert(calls.end(), delta.calls.begin(), delta.calls.end());
    }
    EXPECT_EQ(content, "Think.") << split;
    EXPECT_EQ(reasoning, "") << split;
    ASSERT_EQ(calls.size(), 1u) << split;
    EXPECT_EQ(calls[0].name, "a");
  }
}

TEST(ToolCallId, OpenAiShape) {
  const std::string id = NewToolCallId();
  EXPECT_EQ(id.rfind("call_", 0), 0u);
  EXPECT_EQ(id.size(), 29u);
  EXPECT_NE(id, NewToolCallId());
}

// --- reasoning ---

struct ReasoningCase {
  const char* name;
  bool starts_inside;
  std::string reply;
  std::string reasoning;
  std::string content;
};

TEST(ReasoningSplit, WholeAndStreamed) {
  const ReasoningCase cases[] = {
      {"qwen3", false, "<think>\nLet me think.\n</think>\n\nThe answer.", "Let me think.",
       "The answer."},
      {"r1_opened_by_prompt", true, "\nHmm.\n</think>\n\nYes.", "Hmm.", "Yes."},
      {"no_think", false, "Plain answer <think> later", "", "Plain answer <think> later"},
      {"never_closed", false, "<think>still thinking", "still thinking", ""},
      {"empty_think", false, "<think>\n\n</think>\n\nHi", "", "Hi"},
      {"empty", false, "", "", ""},
      {"close_only_not_opened", false, "a </think> b", "", "a </think> b"},
  };
  for (const ReasoningCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ReasoningSplit whole = SplitReasoning(c.reply, c.starts_inside, true);
    EXPECT_EQ(whole.reasoning, c.reasoning);
    EXPECT_EQ(whole.content, c.content);
    for (size_t split = 0; split <= c.reply.size(); ++split) {
      ReasoningStream stream(c.starts_inside);
      std::string reasoning, content;
      for (const auto& delta : {stream.Push(c.reply.substr(0, split)),
                                stream.Push(c.reply.substr(split)), stream.Finish()}) {
        reasoning += delta.reasoning;
        content += delta.content;
      }
      EXPECT_EQ(reasoning, c.reasoning) << "split at " << split;
      EXPECT_EQ(content, c.content) << "split at " << split;
    }
  }
}

TEST(ReasoningSplit, PromptAndTemplate) {
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n"));
  EXPECT_TRUE(TemplateUsesThinkTags("{{ '<think>' }}"));
  EXPECT_FALSE(TemplateUsesThinkTags("{{ messages }}"));
}

}  // namespace
}  // namespace petrel::server
