// A mapped file that shrinks while it is in use. A read of a page of a file mapping that now
// lies past the file's end raises SIGBUS (Linux and every POSIX system). The read cannot be
// completed or retried, and the computation that made it cannot be unwound, so the process
// cannot go on; what it can do is say which file and why, and exit with an error status instead
// of dying of "Bus error" without a word. This table of live mappings lets a SIGBUS handler
// tell such a fault from any other.
//
// What cannot be detected: a file rewritten in place without shrinking (its new bytes are read
// as weights: MAP_PRIVATE protects the process's own writes, not the file's), and a file whose
// pages were read into memory (`--no-mmap`) is not affected at all. Deleting or renaming a file
// does not change a mapping of it.
#pragma once

#include <cstddef>

namespace petrel {

// Records [data, data + size) as a mapping of `path` (MappedFile does, for file mappings).
// Returns the slot to give ForgetMapping, or -1 when the table is full (a fault in that
// mapping is then reported as any other SIGBUS).
int RememberMapping(const void* data, size_t size, const char* path);
void ForgetMapping(int slot);

// Installs a SIGBUS handler: a fault inside a remembered mapping writes one line to stderr,
// "error: FILE: the file shrank to N bytes while mapped (M bytes); ..." and ends the process
// with `exit_code` (_exit: no destructor can be trusted while a thread is stopped mid-read).
// Any other SIGBUS gets the default action. For programs: a library leaves signals to its host.
void ExitOnMappedFileFault(int exit_code);

}  // namespace petrel
