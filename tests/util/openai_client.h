// Node scripts from tests/ driving a running server with npm packages: the official `openai`
// and `@anthropic-ai/sdk` clients (tests/openai_client/*.mjs) and `puppeteer-core` with Debian's chromium
// (tests/webui/*.mjs). Packages are installed on demand into a folder of the scratch folder;
// the tests skip, saying why, where node, npm, the network or chromium are missing.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/cli_runner.h"

namespace petrel::testing {

// The folder `specs` (npm package specs such as "openai@4") are installed into, under the
// scratch folder's `name`, or "" with `*skip` set to why they cannot be. Test programs run in
// parallel and several share a folder: the install holds a lock on the folder (flock), and a
// stamp naming the specs is written only once npm has finished, so no test reads a half-written
// node_modules and a folder already installed is not installed again.
inline std::string NpmPackagesDir(const std::string& name, const std::vector<std::string>& specs,
                                  std::string* skip) {
  if (std::system("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0) {
    *skip = "node and npm are needed for this test (scripts/setup.sh installs them)";
    return "";
  }
  const std::string dir = ScratchDir() + "/" + name;
  std::string wanted;
  for (const std::string& spec : specs) {
    wanted += ' ';
    wanted += Quote(spec);
  }
  const std::string stamp = Quote("installed:" + wanted);
  const std::string install =
      "mkdir -p " + Quote(dir) + " && cd " + Quote(dir) + " && flock .install.lock sh -c " +
      Quote("test \"$(cat .installed 2>/dev/null)\" = " + stamp +
            " || { npm install --silent --no-audit --no-fund" + wanted +
            " >npm.log 2>&1 && printf %s " + stamp + " >.installed; }");
  if (std::system(install.c_str()) != 0) {
    *skip = "npm could not install" + wanted + " (offline?); see " + dir + "/npm.log";
    return "";
  }
  return dir;
}

// The folder the `openai` and `@anthropic-ai/sdk` packages are installed into, or "" with
// `*skip` set to why they cannot be.
inline std::string OpenAiClientDir(std::string* skip) {
  return NpmPackagesDir("openai_client", {"openai@4", "@anthropic-ai/sdk@0"}, skip);
}

// The source tree's tests/ folder (PETREL_SOURCE_DIR, set by meson).
inline std::string TestsSourceDir() {
  const char* source = std::getenv("PETREL_SOURCE_DIR");
  return std::string(source ? source : "..") + "/tests";
}

// Runs `node tests/SCRIPT PORT OUT EXTRA...` from `dir` (where its packages are); returns the
// JSON the script wrote to OUT (discarded when it failed or wrote none). Its output goes to
// OUT.log (NodeScriptLog).
inline nlohmann::json RunNodeScript(const std::string& dir, const std::string& script, int port,
                                    const std::vector<std::string>& extra = {}) {
  const std::string out = dir + "/" + script.substr(script.rfind('/') + 1) + ".json";
  std::remove(out.c_str());
  std::string command = "cd " + Quote(dir) + " && node " + Quote(TestsSourceDir() + "/" + script) +
                        " " + std::to_string(port) + " " + Quote(out);
  for (const std::string& arg : extra) {
    command += ' ';
    command += Quote(arg);
  }
  command += " >" + Quote(out + ".log") + " 2>&1";
  if (std::system(command.c_str()) != 0) return nlohmann::json::value_t::discarded;
  std::ifstream in(out);
  return nlohmann::json::parse(in, nullptr, false);
}

// What RunNodeScript's run of `script` printed.
inline std::string NodeScriptLog(const std::string& dir, const std::string& script) {
  std::ifstream in(dir + "/" + script.substr(script.rfind('/') + 1) + ".json.log");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs tests/openai_client/SCRIPT with the server's port and an output path.
inline nlohmann::json RunOpenAiScript(const std::string& dir, const std::string& script, int port) {
  return RunNodeScript(dir, "openai_client/" + script, port);
}

}  // namespace petrel::testing
