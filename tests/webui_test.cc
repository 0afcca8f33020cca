// The chat page of `petrel serve` (src/server/webui/): its files served byte for byte from the
// binary with their content types and a Content-Security-Policy without inline script, public
// under --api-key while the API is not, gone with --no-webui; then the page itself in headless
// chromium (puppeteer-core, tests/webui/chat.mjs): the key prompt, a streamed greedy reply equal
// to the API's, stop mid-stream cancelling the request, a 400's message shown, the conversation
// found again after a reload, and model text full of HTML shown as text with no script run.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "util/cli_runner.h"
#include "util/openai_client.h"
#include "util/pty_process.h"  // WriteChatTemplate
#include "util/server_process.h"

namespace petrel::testing {
namespace {

using json = nlohmann::json;
constexpr const char* kKey = "webui-key";
constexpr const char* kModelName = "webui-story";

httplib::Headers Auth() { return {{"Authorization", std::string("Bearer ") + kKey}}; }

std::string SourceFile(const std::string& path) {
  std::ifstream in(TestsSourceDir() + "/../" + path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Collapses runs of white space: the page lays paragraphs out as blocks, so its text differs
// from the raw reply only there.
std::string Squeeze(const std::string& text) {
  std::string out = std::regex_replace(text, std::regex("\\s+"), " ");
  if (!out.empty() && out.front() == ' ') out.erase(0, 1);
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Chromium for the page tests: PETREL_CHROMIUM, else Debian's /usr/bin/chromium, else "" with
// `*skip` set.
std::string ChromiumPath(std::string* skip) {
  const char* given = std::getenv("PETREL_CHROMIUM");
  const std::string path = given ? given : "/usr/bin/chromium";
  if (access(path.c_str(), X_OK) != 0) {
    *skip = path + " is missing: the page tests need chromium (scripts/setup.sh installs it)";
    return "";
  }
  return path;
}

class WebUiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    template_path_ = new std::string(WriteChatTemplate("webui"));
    // A pause after each scheduler step keeps a reply streaming long enough to be stopped by a
    // browser on a busy machine (read only by tests, see docs/SERVER.md): the greedy reply to
    // the second message is 114 tokens, over 11 s.
    setenv("PETREL_SERVE_TEST_STEP_DELAY_MS", "100", 1);
    server_ = new ServerProcess({"-m", StoryHf(), "--parallel", "2", "-c", "512", "--api-key", kKey,
                                 "--model-name", kModelName, "--chat-template-file",
                                 *template_path_, "-t", "2"});
    unsetenv("PETREL_SERVE_TEST_STEP_DELAY_MS");
  }
  static void TearDownTestSuite() {
    if (server_->ok()) {
      EXPECT_EQ(server_->Stop(), 0) << server_->log();
    }
    delete server_;
    std::remove(template_path_->c_str());
    delete template_path_;
  }
  void SetUp() override { ASSERT_TRUE(server_->ok()) << server_->log(); }

  static inline ServerProcess* server_ = nullptr;
  static inline std::string* template_path_ = nullptr;
};

TEST_F(WebUiTest, ServesItsFilesWithTypesAndPolicy) {
  httplib::Client client = server_->Client();
  struct File {
    const char* path;
    const char* source;
    const char* content_type;
  };
  for (const File& file :
       {File{"/", "src/server/webui/index.html", "text/html; charset=utf-8"},
        File{"/index.html", "src/server/webui/index.html", "text/html; charset=utf-8"},
        File{"/app.js", "src/server/webui/app.js", "text/javascript; charset=utf-8"},
        File{"/style.css", "src/server/webui/style.css", "text/css; charset=utf-8"}}) {
    SCOPED_TRACE(file.path);
    auto res = client.Get(file.path);  // no key: the page's files are public
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), file.content_type);
    EXPECT_EQ(res->body, SourceFile(file.source));
    const std::string policy = res->get_header_value("Content-Security-Policy");
    EXPECT_NE(policy.find("script-src 'self'"), std::string::npos) << policy;
    EXPECT_NE(policy.find("default-src 'none'"), std::string::npos) << policy;
    EXPECT_EQ(policy.find("unsafe-inline"), std::string::npos) << policy;
    EXPECT_EQ(policy.find("unsafe-eval"), std::string::npos) << policy;
    EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  }
  // The page has no inline script or handler for the policy to forbid, and its script never
  // parses text as HTML.
  const std::string html = SourceFile("src/server/webui/index.html");
  EXPECT_FALSE(std::regex_search(html, std::regex("<script[^>]*>[^<]"))) << "inline script";
  EXPECT_FALSE(std::regex_search(html, std::regex("\\son[a-z]+=", std::regex::icase)));
  EXPECT_FALSE(std::regex_search(html, std::regex("\\sstyle=")));
  const std::string script = SourceFile("src/server/webui/app.js");
  ASSERT_FALSE(script.empty());
  for (const char* sink : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                           "eval(", "new Function", "DOMParser", "createContextualFragment"}) {
    EXPECT_EQ(script.find(sink), std::string::npos) << sink;
  }

  // The API still needs the key; unknown paths are 404s with OpenAI's error object.
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  models = client.Get("/v1/models", Auth());
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  for (const char* path : {"/nope.js", "/appXjs", "/webui/app.js", "/app.js/"}) {
    auto res = client.Get(path, Auth());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_TRUE(json::parse(res->body, nullptr, false).contains("error")) << path;
  }
  // Only GET: a POST to the page is no route.
  auto post = client.Post("/", Auth(), "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 404);
}

TEST(WebUiOffTest, NoWebUiAnswers404) {
  ServerProcess server({"-m", StoryHf(), "-c", "128", "--no-webui", "-t", "1"});
  ASSERT_TRUE(server.ok()) << server.log();
  httplib::Client client = server.Client();
  for (const char* path : {"/", "/index.html", "/app.js", "/style.css"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(res->get_header_value("Content-Security-Policy"), "") << path;
  }
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST_F(WebUiTest, ChatInHeadlessChromium) {
  std::string skip;
  const std::string chromium = ChromiumPath(&skip);
  if (chromium.empty()) GTEST_SKIP() << skip;
  const std::string dir = NpmPackagesDir("webui_browser", {"puppeteer-core@24"}, &skip);
  if (dir.empty()) GTEST_SKIP() << skip;
  const std::string screenshot = dir + "/webui.png";
  std::remove(screenshot.c_str());
  const json seen =
      RunNodeScript(dir, "webui/chat.mjs", server_->port(), {chromium, screenshot, kKey});
  ASSERT_FALSE(seen.is_discarded()) << NodeScriptLog(dir, "webui/chat.mjs") << server_->log();
  SCOPED_TRACE(seen.dump(1));

  // The page asked for the key with the server's 401 message, then showed the model's id.
  EXPECT_NE(seen["key_prompt"].get<std::string>().find("API key"), std::string::npos);
  EXPECT_EQ(seen["model_name"], kModelName);

  // The streamed greedy reply is the API's whole one, with a tokens/s figure from the stream.
  httplib::Client client = server_->Client();
  client.set_read_timeout(120);
  const json request = {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                        {"temperature", 0},
                        {"max_tokens", 24}};
  auto whole = client.Post("/v1/chat/completions", Auth(), request.dump(), "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const json reply = json::parse(whole->body);
  const std::string expected = reply["choices"][0]["message"]["content"];
  ASSERT_FALSE(Squeeze(expected).empty());
  EXPECT_EQ(Squeeze(seen["first"]["content"]), Squeeze(expected));
  EXPECT_EQ(seen["first"]["state"], reply["choices"][0]["finish_reason"]);
  const std::string stats = seen["first"]["stats"];
  std::smatch rate;
  ASSERT_TRUE(std::regex_search(stats, rate, std::regex("([0-9.]+) tokens/s"))) << stats;
  EXPECT_GT(std::stod(rate[1]), 0.0);
  EXPECT_NE(stats.find(std::to_string(reply["usage"]["completion_tokens"].get<int>()) + " tokens"),
            std::string::npos)
      << stats;

  // Stop: the reply keeps what came and grows no more, and the server's sequence is freed long
  // before the rest of its 114 tokens (at 100 ms a step) could have been decoded.
  EXPECT_TRUE(seen["stop_visible"].get<bool>());
  EXPECT_EQ(seen["stopped"]["state"], "stopped");
  EXPECT_GE(seen["stopped"]["content"].get<std::string>().size(), 4u);
  EXPECT_EQ(seen["stopped_later"], seen["stopped"]);
  EXPECT_NE(seen["stopped"]["stats"].get<std::string>().find("stopped"), std::string::npos);
  EXPECT_EQ(seen["running_after_stop"], 0);
  // Polled from 1.5 s after the stop; left running, the reply would have lasted seconds more.
  EXPECT_LT(seen["stop_cancel_ms"].get<int>(), 3000);

  // A refused request shows the server's own message and gives the text back to send again.
  const json refused = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_p", 5}};
  auto error = client.Post("/v1/chat/completions", Auth(), refused.dump(), "application/json");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status, 400);
  EXPECT_EQ(seen["error"], json::parse(error->body)["error"]["message"]);
  EXPECT_EQ(seen["prompt_after_error"], "This one is refused");
  EXPECT_EQ(seen["replies_after_error"], 2);

  // After a reload the conversation is in the list, and opening it shows both turns as they
  // were left; the settings are kept too.
  ASSERT_EQ(seen["titles"].size(), 1u);
  EXPECT_EQ(seen["titles"][0], "Once upon a time");
  EXPECT_EQ(seen["after_new_chat"], 0);
  ASSERT_EQ(seen["reloaded"].size(), 2u);
  EXPECT_EQ(seen["reloaded"][0]["content"], seen["first"]["content"]);
  EXPECT_EQ(seen["reloaded"][1]["content"], seen["stopped"]["content"]);
  EXPECT_EQ(seen["reloaded"][1]["state"], "stopped");
  EXPECT_EQ(seen["reloaded_users"], json({"Once upon a time", "Continue"}));
  EXPECT_EQ(seen["settings_kept"], "400");

  // The screenshot was taken after the stop.
  std::error_code missing;
  EXPECT_GT(std::filesystem::file_size(screenshot, missing), 1000u) << screenshot;
  std::ifstream png(screenshot, std::ios::binary);
  char magic[4] = {};
  png.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");

  // Stored text full of HTML: shown literally, nothing run, no element made from it, while the
  // markdown subset still becomes elements.
  const json& hostile = seen["hostile"];
  const std::string script = "<script>window.__xss = 1</script>";
  const std::string img = "<img src=x onerror=\"window.__xss = 2\">";
  EXPECT_TRUE(hostile["xss"].is_null());
  EXPECT_EQ(hostile["violations"].size(), 0u);
  EXPECT_EQ(hostile["injected_elements"], 0);
  EXPECT_EQ(hostile["user"], script + " " + img);
  EXPECT_EQ(hostile["title"], img + " title");
  EXPECT_EQ(hostile["paragraphs"][0], script);
  EXPECT_EQ(hostile["paragraphs"][1], img);
  EXPECT_EQ(hostile["paragraphs"][2], "bold " + img + " and code " + script);
  EXPECT_EQ(hostile["strong"], json({"bold " + img}));
  EXPECT_EQ(hostile["code"], json({"code " + script}));
  EXPECT_EQ(hostile["bullets"], json({"one", "two"}));
  EXPECT_EQ(hostile["numbered"], json({"first", "second"}));
  EXPECT_EQ(hostile["block"], json({script}));
  EXPECT_EQ(hostile["block_lang"], json({"html"}));
  EXPECT_EQ(hostile["paragraphs"].back(), "after");
  EXPECT_TRUE(hostile["reasoning_present"].get<bool>());
  EXPECT_FALSE(hostile["reasoning_open"].get<bool>());
  EXPECT_EQ(hostile["reasoning"], "thinking " + img);
  EXPECT_EQ(hostile["stats"], "");
  EXPECT_EQ(seen["page_errors"].size(), 0u);
}

}  // namespace
}  // namespace petrel::testing
