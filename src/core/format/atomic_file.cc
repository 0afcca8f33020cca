// AtomicFile: temporary beside the destination, fsync, rename; and the output-is-an-input check.
#include "core/format/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace petrel {
namespace {

constexpr const char* kTempTag = ".petrel-tmp-";
// Writes are gathered to this size; a larger one goes out directly.
constexpr size_t kBufferBytes = size_t(1) << 20;

// The folder part of `path` ("." when it has none) and its name part.
std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return std::string(".");
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}
std::string NameOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Removes ".<name>.petrel-tmp-<pid>" files in `folder` whose process is gone: what a killed
// writer of the same destination left behind. A live process (ours or another's) keeps its own.
void RemoveStaleTemporaries(const std::string& folder, const std::string& name) {
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return;
  const std::string prefix = "." + name + kTempTag;
  while (const dirent* entry = readdir(dir)) {
    const std::string entry_name = entry->d_name;
    if (entry_name.size() <= prefix.size() || entry_name.compare(0, prefix.size(), prefix) != 0)
      continue;
    const std::string digits = entry_name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const long pid = std::strtol(digits.c_str(), nullptr, 10);
    if (pid <= 0 || pid == long(getpid())) continue;
    if (kill(pid_t(pid), 0) == -1 && errno == ESRCH) {
      (void)unlink((folder + "/" + entry_name).c_str());
    }
  }
  closedir(dir);
}

}  // namespace

Result<AtomicFile> AtomicFile::Create(const std::string& path) {
  if (path.empty()) return Error("output path is empty");
  // A link is followed so that its target is replaced and the link stays; a dangling one is
  // replaced itself.
  std::string target = path;
  struct stat link_info;
  if (lstat(path.c_str(), &link_info) == 0 && S_ISLNK(link_info.st_mode)) {
    char resolved[PATH_MAX];
    if (realpath(path.c_str(), resolved) != nullptr) target = resolved;
  }
  mode_t keep_mode = 0;
  bool exists = false;
  struct stat info;
  if (stat(target.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) return Error("%s: is a folder, not a file", path.c_str());
    if (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode)) {
      AtomicFile file;
      file.path_ = path;
      file.target_ = target;
      file.direct_ = true;
      file.fd_ = open(target.c_str(), O_WRONLY | O_CLOEXEC);
      if (file.fd_ < 0)
        return Error("%s: cannot open for writing: %s", path.c_str(), strerror(errno));
      return file;
    }
    if (!S_ISREG(info.st_mode))
      return Error("%s: not a regular file, a character device or a pipe", path.c_str());
    exists = true;
    keep_mode = info.st_mode & 07777;
  }
  const std::string folder = FolderOf(target), name = NameOf(target);
  if (name.empty() || name == "." || name == "..") {
    return Error("%s: names a folder, not a file", path.c_str());
  }
  struct stat folder_info;
  if (stat(folder.c_str(), &folder_info) != 0) {
    if (errno == ENOENT)
      return Error("%s: the folder %s does not exist", path.c_str(), folder.c_str());
    if (errno == ENOTDIR) return Error("%s: %s is not a folder", path.c_str(), folder.c_str());
    return Error("%s: cannot reach the folder %s: %s", path.c_str(), folder.c_str(),
                 strerror(errno));
  }
  if (!S_ISDIR(folder_info.st_mode))
    return Error("%s: %s is not a folder", path.c_str(), folder.c_str());
  RemoveStaleTemporaries(folder, name);

  AtomicFile file;
  file.path_ = path;
  file.target_ = target;
  const std::string temp =
      (folder == "." && target.find('/') == std::string::npos ? "" : folder + "/") + "." + name +
      kTempTag + std::to_string(getpid());
  // O_NOFOLLOW: a link planted at the temporary's name must not redirect the write.
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0)
    return Error("%s: cannot create a file in %s: %s", path.c_str(), folder.c_str(),
                 strerror(errno));
  file.temp_path_ = temp;
  file.fd_ = fd;
  if (exists) (void)fchmod(fd, keep_mode);
  return file;
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      target_(std::move(other.target_)),
      temp_path_(std::move(other.temp_path_)),
      direct_(other.direct_),
      fd_(other.fd_),
      buffer_(std::move(other.buffer_)),
      error_(other.error_) {
  other.fd_ = -1;
  other.temp_path_.clear();
}

AtomicFile::~AtomicFile() { Discard(); }

void AtomicFile::Discard() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  buffer_.clear();
  if (!temp_path_.empty()) (void)unlink(temp_path_.c_str());
  temp_path_.clear();
}

void AtomicFile::Write(const void* bytes, size_t n) {
  if (error_ != 0 || n == 0 || fd_ < 0) return;
  if (buffer_.size() + n <= kBufferBytes) {
    buffer_.append(static_cast<const char*>(bytes), n);
    return;
  }
  Send(bytes, n);
}

void AtomicFile::Send(const void* bytes, size_t n) {
  auto write_all = [&](const char* data, size_t size) {
    while (size > 0 && error_ == 0) {
      const ssize_t written = write(fd_, data, size);
      if (written < 0 && errno == EINTR) continue;
      // A full disk shows as a short write, then an error on the next one.
      if (written <= 0) {
        error_ = written < 0 && errno != 0 ? errno : EIO;
        break;
      }
      data += written;
      size -= size_t(written);
    }
  };
  if (buffer_.capacity() < kBufferBytes) buffer_.reserve(kBufferBytes);
  write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
  if (n >= kBufferBytes) {
    write_all(static_cast<const char*>(bytes), n);
  } else if (n > 0) {
    buffer_.append(static_cast<const char*>(bytes), n);
  }
}

void AtomicFile::SetError(int error_number) {
  if (error_ == 0) error_ = error_number != 0 ? error_number : EIO;
}

Status AtomicFile::Commit() {
  PETREL_CHECK(fd_ >= 0 && (direct_ || !temp_path_.empty()));  // Commit() once
  if (error_ == 0) Send(nullptr, 0);
  // fsync before the rename: otherwise a crash can leave the new name on an empty file. A
  // device or pipe that cannot be synced (EINVAL, EROFS for some) holds nothing to lose.
  if (error_ == 0 && fsync(fd_) != 0 && !(direct_ && (errno == EINVAL || errno == EROFS)))
    error_ = errno != 0 ? errno : EIO;
  const int close_result = close(fd_);
  fd_ = -1;
  if (error_ == 0 && close_result != 0 && errno != EINTR) error_ = errno != 0 ? errno : EIO;
  if (error_ != 0) {
    const int error_number = error_;
    Discard();
    return Error("%s: write failed: %s%s", path_.c_str(), strerror(error_number),
                 direct_ ? "" : " (the file was left as it was)");
  }
  if (direct_) return Status::Ok();
  if (rename(temp_path_.c_str(), target_.c_str()) != 0) {
    const int error_number = errno;
    Discard();
    return Error("%s: cannot replace: %s (the file was left as it was)", path_.c_str(),
                 strerror(error_number));
  }
  temp_path_.clear();
  const std::string folder = FolderOf(target_);
  const int folder_fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder_fd >= 0) {
    (void)fsync(folder_fd);  // best effort: the data is complete either way
    close(folder_fd);
  }
  return Status::Ok();
}

Status CheckOutputIsNotInput(const std::string& output, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  const fs::path output_canonical = fs::weakly_canonical(output, ignored);
  struct stat output_info;
  const bool output_exists = stat(output.c_str(), &output_info) == 0;
  auto same_file = [&](const std::string& input) {
    struct stat input_info;
    return stat(input.c_str(), &input_info) == 0 && input_info.st_dev == output_info.st_dev &&
           input_info.st_ino == output_info.st_ino;
  };
  auto refuse = [&](const std::string& input) {
    return Error("output %s is the input %s (the same file); write the output to another path",
                 output.c_str(), input.c_str());
  };
  for (const std::string& input : inputs) {
    if (input.empty()) continue;
    std::error_code error;
    if (fs::weakly_canonical(input, error) == output_canonical && !error) return refuse(input);
    if (!output_exists) continue;
    struct stat input_info;
    if (stat(input.c_str(), &input_info) != 0) continue;
    if (!S_ISDIR(input_info.st_mode)) {
      if (same_file(input)) return refuse(input);
      continue;
    }
    // A folder model: each file in it (weights, tokenizer, config) is an input.
    for (fs::recursive_directory_iterator
             it(input, fs::directory_options::skip_permission_denied, error),
         end;
         !error && it != end; it.increment(error)) {
      std::error_code type_error;
      if (it->is_regular_file(type_error) && same_file(it->path().string()))
        return refuse(it->path().string());
    }
  }
  return Status::Ok();
}

}  // namespace petrel
