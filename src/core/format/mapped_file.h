// Read-only memory mapping of a whole file; the weights of a model are used in place from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/base/status.h"

namespace petrel {

// How MappedFile::Open brings a file in.
struct MapOptions {
  bool read_into_memory = false;  // read() into anonymous memory instead of mapping the file
                                  // (filesystems where mapping is slow or unsupported)
  bool lock = false;  // mlock the pages; when the lock limit refuses, one warning and go on
  // Called as bytes are read in (read_into_memory) or pre-faulted (lock) for files of at least
  // kProgressMinBytes: (path, bytes done, bytes in all).
  std::function<void(const std::string&, size_t, size_t)> progress;
};
inline constexpr size_t kProgressMinBytes = size_t(100) << 20;

// Sets the MapOptions of every Open on this thread while it lives, so that the format readers
// (which open their files themselves) follow the loader's options.
class ScopedMapOptions {
 public:
  explicit ScopedMapOptions(MapOptions options);
  ~ScopedMapOptions();
  ScopedMapOptions(const ScopedMapOptions&) = delete;
  ScopedMapOptions& operator=(const ScopedMapOptions&) = delete;

 private:
  MapOptions previous_;
};

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  int fault_slot_ = -1;  // its entry in the table of mappings (mapping_fault.h), or -1
};

}  // namespace petrel
