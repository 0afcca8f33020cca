// Read-only memory mapping of a whole file (open, fstat, mmap MAP_PRIVATE).
#include "core/format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace petrel {

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int saved = errno;
    ::close(fd);
    return Error("%s: cannot stat: %s", path.c_str(), std::strerror(saved));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return Error("%s: not a regular file", path.c_str());
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size_t(info.st_size);
  // mmap rejects a zero length, so an empty file maps to nothing; parsers then report it as
  // truncated rather than failing here with a confusing EINVAL.
  if (file->size_ > 0) {
    void* addr = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int saved = errno;
      ::close(fd);
      return Error("%s: cannot map %zu bytes: %s", path.c_str(), file->size_, std::strerror(saved));
    }
    file->data_ = static_cast<const uint8_t*>(addr);
  }
  // The mapping keeps the file alive; the descriptor is no longer needed.
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace petrel
