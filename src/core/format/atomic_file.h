// Writing a user-named file without ever damaging it: the bytes go to a temporary file in the
// destination's folder, which replaces the destination only once it is complete and on disk.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace petrel {

// The temporary is named ".<name>.petrel-tmp-<pid>" beside the destination (same folder, so the
// final rename(2) stays on one filesystem and is atomic). A write error, a failed Commit() or
// destruction without Commit() removes it and leaves the destination exactly as it was. A
// process killed outright (SIGKILL, power loss) cannot remove it: the next AtomicFile for the
// same destination removes temporaries whose writing process no longer exists.
class AtomicFile {
 public:
  // Refuses a destination that is a folder or a block device. A character device or a pipe
  // (/dev/null, /dev/stdout) holds no file to damage and cannot be replaced by a rename, so it
  // is written directly. A symbolic link is followed: its target is replaced and the link kept.
  // An existing destination's permission bits are kept.
  static Result<AtomicFile> Create(const std::string& path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Appends `n` bytes; the first failure is kept and reported by Commit(). The bytes are
  // buffered here and go out through write(2) on the temporary's descriptor (not stdio), so
  // every short write and error of the system call is seen, and a test can inject them.
  void Write(const void* bytes, size_t n);
  // Records an error found by the caller, so Commit() fails.
  void SetError(int error_number);
  bool ok() const { return error_ == 0; }  // no write has failed yet

  // Flushes, fsyncs and renames the temporary over the destination (then fsyncs the folder so
  // the rename itself survives a crash). On error the temporary is removed.
  Status Commit();

  const std::string& path() const { return path_; }            // as given
  const std::string& temp_path() const { return temp_path_; }  // the temporary (if any)

 private:
  AtomicFile() = default;
  void Discard();

  std::string path_;       // the destination as given (for messages)
  std::string target_;     // what the rename replaces: `path_` or its link target
  std::string temp_path_;  // empty once committed or discarded, and when `direct_`
  bool direct_ = false;    // writing straight to a device or pipe
  // Sends the buffer, then `n` more bytes, to the descriptor, looping over short writes.
  void Send(const void* bytes, size_t n);

  int fd_ = -1;
  std::string buffer_;  // bytes not yet written
  int error_ = 0;       // first write errno
};

// Refuses to write `output` when it is one of `inputs` (each a file, or a folder whose files all
// count): by the same path, or the same file reached through a symbolic or hard link (same
// device and inode). Call it before opening anything for writing. The error names both paths.
Status CheckOutputIsNotInput(const std::string& output, const std::vector<std::string>& inputs);

}  // namespace petrel
