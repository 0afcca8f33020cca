// The chat page's routes: the compiled-in files, their content types, and a Content-Security-
// Policy that forbids inline script.
#include "server/web_ui.h"

#include <httplib.h>

#include <iterator>
#include <string>

#include "server/embedded_file.h"

namespace petrel::server {

// Written at build time by scripts/embed_files.py from src/server/webui/.
extern const EmbeddedFile kWebUiFiles[];
extern const size_t kWebUiFiles_count;

namespace {

struct ContentType {
  std::string_view extension;
  const char* mime;
};

// A file whose extension is missing here is sent as bytes to download, never as something the
// browser would render or run.
constexpr ContentType kContentTypes[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
};

const char* ContentTypeOf(std::string_view name) {
  for (const ContentType& type : kContentTypes) {
    if (name.size() >= type.extension.size() &&
        name.substr(name.size() - type.extension.size()) == type.extension) {
      return type.mime;
    }
  }
  return "application/octet-stream";
}

// Only the page's own files may be loaded, and only the page's own origin called: no inline
// script or style (model text put into the page can never run), no plugins, no framing.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace

std::optional<WebUiFile> FindWebUiFile(std::string_view path) {
  if (path == "/") path = "/index.html";
  if (path.empty() || path.front() != '/') return std::nullopt;
  const std::string_view name = path.substr(1);
  for (size_t i = 0; i < kWebUiFiles_count; ++i) {
    const EmbeddedFile& file = kWebUiFiles[i];
    if (name == file.name) {
      return WebUiFile{std::string_view(reinterpret_cast<const char*>(file.data), file.size),
                       ContentTypeOf(name)};
    }
  }
  return std::nullopt;
}

void RouteWebUi(httplib::Server& server) {
  auto serve = [](const httplib::Request& req, httplib::Response& res) {
    const std::optional<WebUiFile> file = FindWebUiFile(req.path);
    if (!file) {
      res.status = 404;  // the error handler writes the body
      return;
    }
    res.set_header("Content-Security-Policy", kContentSecurityPolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    // A new petrel binary may bring a new page: the browser asks again each time.
    res.set_header("Cache-Control", "no-cache");
    res.set_content(file->body.data(), file->body.size(), file->content_type);
  };
  server.Get("/", serve);
  // cpp-httplib reads a pattern as a regex, whose '.' matches any character: FindWebUiFile()
  // answers only the exact names.
  for (size_t i = 0; i < kWebUiFiles_count; ++i) {
    server.Get(std::string("/").append(kWebUiFiles[i].name), serve);
  }
}

}  // namespace petrel::server
