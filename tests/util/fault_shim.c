// An LD_PRELOAD library that makes one system call fail, so that tests can show what a writer
// does when the disk is full, the device errs, or a rename is refused. Chosen by environment:
//   PETREL_FAULT_PATH   only paths containing this text (and descriptors opened on them) count
//   PETREL_FAULT_CALL   open | write | fsync | rename
//   PETREL_FAULT_AFTER  how many counted calls succeed before the failing one (default 0)
//   PETREL_FAULT_ERRNO  ENOSPC | EIO | EACCES | EXDEV | EDQUOT | EROFS (default EIO)
//   PETREL_FAULT_SHORT  1: the failing write writes half its bytes and returns that short count,
//                       and every later write on the descriptor fails (how a full disk looks)
// Calls after the failing one fail too where that is what a real fault does (a full disk stays
// full); a failed open, fsync or rename fails once.
#define _GNU_SOURCE
// open and open64 are both defined here: the headers must not rename one to the other.
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

enum { kMaxFds = 65536 };
static unsigned char watched[kMaxFds];  // descriptors opened on a matching path
static long counted;                    // matching calls of the chosen kind so far
static int failed_write_fd = -1;        // a descriptor whose disk is now "full"

static const char* Env(const char* name) {
  const char* value = getenv(name);
  return value && *value ? value : NULL;
}

static int Matches(const char* path) {
  const char* needle = Env("PETREL_FAULT_PATH");
  return needle && path && strstr(path, needle) != NULL;
}

static int ChosenErrno(void) {
  const char* name = Env("PETREL_FAULT_ERRNO");
  if (!name || strcmp(name, "EIO") == 0) return EIO;
  if (strcmp(name, "ENOSPC") == 0) return ENOSPC;
  if (strcmp(name, "EACCES") == 0) return EACCES;
  if (strcmp(name, "EXDEV") == 0) return EXDEV;
  if (strcmp(name, "EDQUOT") == 0) return EDQUOT;
  if (strcmp(name, "EROFS") == 0) return EROFS;
  return atoi(name) > 0 ? atoi(name) : EIO;
}

// True when this counted call of kind `call` is the one to fail.
static int FailNow(const char* call) {
  const char* chosen = Env("PETREL_FAULT_CALL");
  if (!chosen || strcmp(chosen, call) != 0) return 0;
  const char* after = Env("PETREL_FAULT_AFTER");
  return __atomic_fetch_add(&counted, 1, __ATOMIC_SEQ_CST) == (after ? atol(after) : 0);
}

static void* Next(const char* name) { return dlsym(RTLD_NEXT, name); }

// `at`: the openat form, with a folder descriptor.
static int OpenCommon(const char* symbol, int at, int dirfd, const char* path, int flags,
                      mode_t mode) {
  const int writing = (flags & (O_WRONLY | O_RDWR | O_CREAT)) != 0;
  if (writing && Matches(path) && FailNow("open")) {
    errno = ChosenErrno();
    return -1;
  }
  int fd;
  if (!at) {
    int (*real)(const char*, int, ...) = (int (*)(const char*, int, ...))Next(symbol);
    fd = real(path, flags, mode);
  } else {
    int (*real)(int, const char*, int, ...) = (int (*)(int, const char*, int, ...))Next(symbol);
    fd = real(dirfd, path, flags, mode);
  }
  if (fd >= 0 && fd < kMaxFds) watched[fd] = (unsigned char)(writing && Matches(path));
  return fd;
}

static mode_t ModeArg(int flags, va_list args) {
  return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}

int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeArg(flags, args);
  va_end(args);
  return OpenCommon("open", 0, AT_FDCWD, path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeArg(flags, args);
  va_end(args);
  return OpenCommon("open64", 0, AT_FDCWD, path, flags, mode);
}
int openat(int dirfd, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeArg(flags, args);
  va_end(args);
  return OpenCommon("openat", 1, dirfd, path, flags, mode);
}
int openat64(int dirfd, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = ModeArg(flags, args);
  va_end(args);
  return OpenCommon("openat64", 1, dirfd, path, flags, mode);
}

int close(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))Next("close");
  if (fd >= 0 && fd < kMaxFds) watched[fd] = 0;
  if (fd == failed_write_fd) failed_write_fd = -1;
  return real(fd);
}

ssize_t write(int fd, const void* bytes, size_t n) {
  static ssize_t (*real)(int, const void*, size_t);
  if (!real) real = (ssize_t (*)(int, const void*, size_t))Next("write");
  if (fd >= 0 && fd < kMaxFds && watched[fd]) {
    if (fd == failed_write_fd) {
      errno = ChosenErrno();
      return -1;
    }
    if (FailNow("write")) {
      failed_write_fd = fd;
      if (Env("PETREL_FAULT_SHORT") && n > 1) return real(fd, bytes, n / 2);
      errno = ChosenErrno();
      return -1;
    }
  }
  return real(fd, bytes, n);
}

static int SyncCommon(const char* symbol, int fd) {
  int (*real)(int) = (int (*)(int))Next(symbol);
  if (fd >= 0 && fd < kMaxFds && watched[fd] && FailNow("fsync")) {
    errno = ChosenErrno();
    return -1;
  }
  return real(fd);
}
int fsync(int fd) { return SyncCommon("fsync", fd); }
int fdatasync(int fd) { return SyncCommon("fdatasync", fd); }

static int RenameFails(const char* from, const char* to) {
  if ((Matches(from) || Matches(to)) && FailNow("rename")) {
    errno = ChosenErrno();
    return 1;
  }
  return 0;
}
int rename(const char* from, const char* to) {
  if (RenameFails(from, to)) return -1;
  int (*real)(const char*, const char*) = (int (*)(const char*, const char*))Next("rename");
  return real(from, to);
}
int renameat(int from_dir, const char* from, int to_dir, const char* to) {
  if (RenameFails(from, to)) return -1;
  int (*real)(int, const char*, int, const char*) =
      (int (*)(int, const char*, int, const char*))Next("renameat");
  return real(from_dir, from, to_dir, to);
}
int renameat2(int from_dir, const char* from, int to_dir, const char* to, unsigned flags) {
  if (RenameFails(from, to)) return -1;
  int (*real)(int, const char*, int, const char*, unsigned) =
      (int (*)(int, const char*, int, const char*, unsigned))Next("renameat2");
  return real(from_dir, from, to_dir, to, flags);
}
