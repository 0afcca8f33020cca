// The C API's plumbing shared by every entry point: the thread's last error message, the
// barrier that keeps exceptions from crossing into C, and params structs read by their size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "petrel/petrel.h"

namespace petrel::capi {

// The integer a C caller stored in an enum argument or field. C lets any int be there; in C++
// loading a value outside the enumerators' range as the enum is undefined behaviour (UBSan's
// -fsanitize=enum), so the bytes are read as an int and compared with the enumerators.
template <typename Enum>
int32_t EnumBits(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "C enums are int-sized");
  int32_t raw;
  std::memcpy(&raw, &value, sizeof(raw));
  return raw;
}

// Records `message` as this thread's last error and returns `code`.
petrel_status Fail(petrel_status code, const std::string& message);
petrel_status FailF(petrel_status code, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

// Runs `body` (returning a petrel_status) so that no exception reaches the C caller: an
// allocation failure is PETREL_ERR_OUT_OF_MEMORY, anything else PETREL_ERR_INTERNAL.
template <typename Body>
petrel_status Guard(const char* function, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return FailF(PETREL_ERR_OUT_OF_MEMORY, "%s: out of memory", function);
  } catch (const std::exception& error) {
    return FailF(PETREL_ERR_INTERNAL, "%s: unexpected exception: %s", function, error.what());
  } catch (...) {
    return FailF(PETREL_ERR_INTERNAL, "%s: unexpected exception", function);
  }
}

// Copies the caller's `given` params over `defaults` into `out`, by given->struct_size: a
// smaller struct (an older header) keeps the defaults of the fields it lacks; a larger one (a
// newer header) is accepted when every byte this library does not know is zero, so that a
// field set to a value the library cannot honour is an error rather than ignored. NULL
// `given`: the defaults.
petrel_status ReadSizedParams(const void* given, const void* defaults, size_t known_size,
                              const char* what, void* out);

template <typename Params>
petrel_status ReadParams(const Params* given, const Params& defaults, const char* what,
                         Params* out) {
  return ReadSizedParams(given, &defaults, sizeof(Params), what, out);
}

// Writes the first min(out->struct_size, sizeof(Result)) bytes of `value` to `out` (NULL: none),
// keeping the caller's struct_size: a caller built against an older header gets the fields
// its struct has.
template <typename Result>
void WriteSized(const Result& value, Result* out) {
  if (!out || out->struct_size < sizeof(size_t)) return;
  const size_t size = out->struct_size < sizeof(Result) ? out->struct_size : sizeof(Result);
  const size_t caller_size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &value, size);
  out->struct_size = caller_size;
}

}  // namespace petrel::capi
