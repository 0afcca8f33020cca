// The table of live file mappings and the SIGBUS handler that reads it (mapping_fault.h). The
// handler may only make async-signal-safe calls: it reads the table through atomics, formats
// numbers itself, and uses stat, write and _exit.
#include "core/format/mapping_fault.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace petrel {
namespace {

constexpr int kSlots = 256;  // mappings alive at once: a model's GGUF or safetensors shards
constexpr size_t kPathBytes = 512;

struct Slot {
  std::atomic<bool> taken{false};   // reserved by RememberMapping
  std::atomic<uintptr_t> begin{0};  // 0 while the slot is being filled or is free
  std::atomic<uintptr_t> end{0};
  char path[kPathBytes] = {};
};
Slot g_slots[kSlots];

int g_exit_code = 1;

// Appends `text` to [*out, limit).
void Append(char** out, const char* limit, const char* text) {
  while (*text && *out < limit) *(*out)++ = *text++;
}

void AppendNumber(char** out, const char* limit, unsigned long long value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = char('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n > 0 && *out < limit) *(*out)++ = digits[--n];
}

void OnBusError(int signal, siginfo_t* info, void*) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const Slot& slot : g_slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= slot.end.load(std::memory_order_relaxed))
      continue;
    char line[kPathBytes + 256];
    char* out = line;
    const char* limit = line + sizeof(line) - 1;
    Append(&out, limit, "error: ");
    Append(&out, limit, slot.path);
    struct stat now;
    if (::stat(slot.path, &now) == 0) {
      Append(&out, limit, ": the file shrank to ");
      AppendNumber(&out, limit, (unsigned long long)now.st_size);
      Append(&out, limit, " bytes while mapped (");
    } else {
      Append(&out, limit, ": the file was truncated and removed while mapped (");
    }
    AppendNumber(&out, limit, (unsigned long long)(slot.end.load() - begin));
    Append(&out, limit,
           " bytes); its weights can no longer be read (do not modify a model file while it is "
           "in use)\n");
    (void)!::write(STDERR_FILENO, line, size_t(out - line));
    ::_exit(g_exit_code);
  }
  // Not ours: the default action, as if no handler had been installed.
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

}  // namespace

int RememberMapping(const void* data, size_t size, const char* path) {
  for (int i = 0; i < kSlots; ++i) {
    Slot& slot = g_slots[i];
    bool expected = false;
    if (!slot.taken.compare_exchange_strong(expected, true)) continue;
    std::strncpy(slot.path, path, kPathBytes - 1);
    slot.path[kPathBytes - 1] = '\0';
    slot.end.store(reinterpret_cast<uintptr_t>(data) + size, std::memory_order_relaxed);
    slot.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return i;
  }
  return -1;
}

void ForgetMapping(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  g_slots[slot].begin.store(0, std::memory_order_release);
  g_slots[slot].taken.store(false, std::memory_order_release);
}

void ExitOnMappedFileFault(int exit_code) {
  g_exit_code = exit_code;
  struct sigaction action = {};
  action.sa_sigaction = &OnBusError;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

}  // namespace petrel
