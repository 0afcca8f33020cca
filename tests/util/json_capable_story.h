// A chat model that can write JSON, for the tests of tool calls: the story model with six
// tokens renamed to '{', '}', '[', ']', '/' and '=' (written into the scratch folder).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "util/cli_runner.h"

namespace petrel::testing {

// The story model, whose vocabulary cannot spell '{', '}', '[', ']', '/' or '=' (so no JSON, no
// closing tags and no harmony recipients), with six of its longest merged tokens renamed to those characters (and the merges
// that made them dropped): the weights are the same, so the grammar can make it write calls.
inline std::string JsonCapableStory() {
  namespace fs = std::filesystem;
  const std::string dir = ScratchDir() + "/story_json_" + std::to_string(getpid());
  fs::create_directories(dir);
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors",
                           "special_tokens_map.json", "tokenizer_config.json"}) {
    fs::copy_file(StoryHf() + "/" + name, dir + "/" + name, fs::copy_options::overwrite_existing);
    fs::permissions(dir + "/" + name, fs::perms::owner_read | fs::perms::owner_write);
  }
  std::ifstream in(StoryHf() + "/tokenizer.json");
  nlohmann::ordered_json tokenizer = nlohmann::ordered_json::parse(in);
  auto& vocab = tokenizer["model"]["vocab"];
  auto& merges = tokenizer["model"]["merges"];
  std::set<std::string> inputs;
  for (const auto& merge : merges) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    inputs.insert(text.substr(0, space));
    inputs.insert(text.substr(space + 1));
  }
  std::vector<std::pair<std::string, int>> candidates;
  for (const auto& [token, id] : vocab.items()) {
    if (token.size() >= 4 && !inputs.count(token)) candidates.push_back({token, id});
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  std::set<std::string> renamed;
  // '/' for the closing tags of tool-call syntaxes (Hermes' </tool_call>): a grammar the
  // vocabulary cannot spell to its end is refused before generation.
  // '=' for harmony's recipients (to=functions.NAME).
  const char* brackets[] = {"{", "}", "[", "]", "/", "="};
  nlohmann::ordered_json new_vocab = nlohmann::ordered_json::object();
  std::map<std::string, std::string> rename;
  for (size_t i = 0; i < std::size(brackets) && i < candidates.size(); ++i) {
    rename[candidates[i].first] = brackets[i];
  }
  for (const auto& [token, id] : vocab.items()) {
    new_vocab[rename.count(token) ? rename[token] : token] = id;
  }
  vocab = new_vocab;
  nlohmann::ordered_json kept = nlohmann::ordered_json::array();
  for (const auto& merge : merges) {
    std::string text = merge.get<std::string>();
    const std::string joined = text.substr(0, text.find(' ')) + text.substr(text.find(' ') + 1);
    if (!rename.count(joined)) kept.push_back(merge);
  }
  merges = kept;
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump();
  return dir;
}

}  // namespace petrel::testing
