// The official `openai` and `@anthropic-ai/sdk` npm packages driving a test script
// (tests/openai_client/*.mjs) against a running server: installed on demand into the scratch
// folder, skipped with a reason where node, npm or the network are missing.
#pragma once

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "util/cli_runner.h"

namespace petrel::testing {

// The folder both packages are installed into, or "" with `*skip` set to why it cannot be.
inline std::string OpenAiClientDir(std::string* skip) {
  if (std::system("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0) {
    *skip = "node and npm are needed for the official client tests";
    return "";
  }
  const std::string dir = ScratchDir() + "/openai_client";
  const std::string install = "mkdir -p " + Quote(dir) + " && cd " + Quote(dir) +
                              " && (test -d node_modules/openai && test -d "
                              "node_modules/@anthropic-ai/sdk || npm install --silent --no-audit "
                              "--no-fund openai@4 @anthropic-ai/sdk@0 >npm.log 2>&1)";
  if (std::system(install.c_str()) != 0) {
    *skip = "npm could not install the openai and @anthropic-ai/sdk packages (offline?); see " +
            dir + "/npm.log";
    return "";
  }
  return dir;
}

// Runs tests/openai_client/SCRIPT with the server's port and an output path; returns the JSON
// the script wrote (discarded when it failed or wrote none).
inline nlohmann::json RunOpenAiScript(const std::string& dir, const std::string& script, int port) {
  const char* source = std::getenv("PETREL_SOURCE_DIR");
  const std::string path = std::string(source ? source : "..") + "/tests/openai_client/" + script;
  const std::string out = dir + "/" + script + ".json";
  std::remove(out.c_str());
  const std::string command = "cd " + Quote(dir) + " && node " + Quote(path) + " " +
                              std::to_string(port) + " " + Quote(out) + " >" +
                              Quote(out + ".log") + " 2>&1";
  if (std::system(command.c_str()) != 0) return nlohmann::json::value_t::discarded;
  std::ifstream in(out);
  return nlohmann::json::parse(in, nullptr, false);
}

}  // namespace petrel::testing
