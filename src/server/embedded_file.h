// A file compiled into the binary: scripts/embed_files.py writes a table of these at build time.
#pragma once

#include <cstddef>

namespace petrel::server {

struct EmbeddedFile {
  const char* name;           // the file's base name, e.g. "app.js"
  const unsigned char* data;  // (size + 1) bytes: the file, then a NUL
  size_t size;                // the file's bytes, the NUL left out
};

}  // namespace petrel::server
