// The chat page `petrel serve` answers at `/` (src/server/webui/, compiled into the binary): its
// files by path, with their content types and the headers that keep the browser from running
// anything but the page's own script.
#pragma once

#include <optional>
#include <string_view>

namespace httplib {
class Server;
}

namespace petrel::server {

struct WebUiFile {
  std::string_view body;
  const char* content_type;
};

// The file a GET of `path` answers ("/" is index.html), or nullopt when `path` is none of them.
std::optional<WebUiFile> FindWebUiFile(std::string_view path);

// GET / and each file of the page. The page holds nothing of the model or of anyone's data, so
// these routes need no API key (a browser cannot send one to open a page); the page asks for the
// key and sends it with every API call.
void RouteWebUi(httplib::Server& server);

}  // namespace petrel::server
