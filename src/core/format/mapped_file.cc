// Read-only memory mapping of a whole file (open, fstat, mmap MAP_PRIVATE), or a copy read into
// anonymous memory; optionally locked in RAM.
#include "core/format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/base/log.h"
#include "core/format/mapping_fault.h"

namespace petrel {
namespace {

thread_local MapOptions g_options;
thread_local bool g_lock_warned = false;

// Reads all of `fd` into `data` in chunks, reporting progress.
Status ReadAll(int fd, const std::string& path, uint8_t* data, size_t size, const MapOptions& options) {
  constexpr size_t kChunk = size_t(16) << 20;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, data + done, std::min(kChunk, size - done), off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error("%s: cannot read at byte %zu: %s", path.c_str(), done, std::strerror(errno));
    if (n == 0) return Error("%s: ended at byte %zu while reading %zu bytes", path.c_str(), done, size);
    done += size_t(n);
    if (options.progress && size >= kProgressMinBytes) options.progress(path, done, size);
  }
  return Status::Ok();
}

// Touches every page so that the whole file is resident before the first token, reporting
// progress (mlock faults them in too, but in one silent call).
void Prefault(const std::string& path, const uint8_t* data, size_t size, const MapOptions& options) {
  constexpr size_t kChunk = size_t(16) << 20;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  volatile uint8_t sink = 0;
  for (size_t begin = 0; begin < size; begin += kChunk) {
    const size_t end = std::min(size, begin + kChunk);
    for (size_t i = begin; i < end; i += page) sink = sink + data[i];
    options.progress(path, end, size);
  }
}

}  // namespace

ScopedMapOptions::ScopedMapOptions(MapOptions options) : previous_(std::move(g_options)) {
  g_options = std::move(options);
  g_lock_warned = false;
}

ScopedMapOptions::~ScopedMapOptions() { g_options = std::move(previous_); }

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
  // st_size is 64 bits everywhere (Meson builds with _FILE_OFFSET_BITS=64), size_t only 32 bits
  // on 32-bit ARM: a file past 4 GiB would otherwise be mapped truncated to its size modulo 2^32.
  static_assert(sizeof(info.st_size) == 8, "large-file support (_FILE_OFFSET_BITS=64) is needed");
  if (uint64_t(info.st_size) > uint64_t(std::numeric_limits<size_t>::max())) {
    ::close(fd);
    return Error(
        "%s: %llu bytes is more than a 32-bit process can address; run a 64-bit "
        "(aarch64) build for this model",
        path.c_str(), (unsigned long long)info.st_size);
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = size_t(info.st_size);
  // mmap rejects a zero length, so an empty file maps to nothing; parsers then report it as
  // truncated rather than failing here with a confusing EINVAL.
  if (file->size_ > 0) {
    const MapOptions& options = g_options;
    void* addr = options.read_into_memory
                     ? ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                     : ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int saved = errno;
      ::close(fd);
      // A 32-bit process has about 3 GiB of address space for everything: say so, since
      // "cannot allocate memory" on a board with free RAM is otherwise a puzzle.
      const char* hint = sizeof(void*) == 4 && saved == ENOMEM
                             ? " (a 32-bit process has about 3 GiB of address space)"
                             : "";
      return Error("%s: cannot %s %zu bytes: %s%s", path.c_str(),
                   options.read_into_memory ? "allocate" : "map", file->size_, std::strerror(saved),
                   hint);
    }
    file->data_ = static_cast<const uint8_t*>(addr);
    if (options.read_into_memory) {
      const Status read = ReadAll(fd, path, static_cast<uint8_t*>(addr), file->size_, options);
      if (!read.ok()) {
        ::close(fd);
        return read;  // the destructor unmaps
      }
      ::mprotect(addr, file->size_, PROT_READ);
    } else if (options.lock && options.progress && file->size_ >= kProgressMinBytes) {
      Prefault(path, file->data_, file->size_, options);
    }
    if (options.lock && ::mlock(addr, file->size_) != 0 && !g_lock_warned) {
      // Like llama.cpp: locking is a request; without it the weights still work, only pageable.
      g_lock_warned = true;
      PETREL_LOG_WARN("cannot lock %zu bytes of %s in memory (%s); raise the lock limit (ulimit -l) "
                      "to keep the weights resident",
                      file->size_, path.c_str(), std::strerror(errno));
    }
  }
  // A file mapping faults (SIGBUS) if the file shrinks under it: remembered so that the
  // fault can be reported as that (mapping_fault.h).
  if (file->data_ != nullptr && !g_options.read_into_memory) {
    file->fault_slot_ = RememberMapping(file->data_, file->size_, path.c_str());
  }
  // The mapping keeps the file alive; the descriptor is no longer needed.
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  ForgetMapping(fault_slot_);
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace petrel
