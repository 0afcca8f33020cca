// Errors as values: Status, Result<T>, and the macros that propagate them; PETREL_CHECK for bugs.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace petrel {

// A Status is OK or carries a one-line message that names what is wrong and where.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

  // Prefixes context: Error("bad dims").Wrap("tensor blk.0.attn_q.weight") ->
  // "tensor blk.0.attn_q.weight: bad dims".
  Status Wrap(const std::string& context) const {
    if (ok()) return *this;
    return Status(context + ": " + message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)), failed_(true) {}
  friend Status ErrorMessage(std::string message);

  std::string message_;
  bool failed_ = false;
};

inline Status ErrorMessage(std::string message) { return Status(std::move(message)); }

// printf-style error constructor: `return Error("tensor %s: bad type %u", name, id);`
Status Error(const char* format, ...) __attribute__((format(printf, 1, 2)));

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT
    if (std::get<Status>(state_).ok()) state_ = ErrorMessage("internal: OK status used as error");
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(state_); }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace petrel

#define PETREL_CONCAT_INNER(a, b) a##b
#define PETREL_CONCAT(a, b) PETREL_CONCAT_INNER(a, b)

#define PETREL_RETURN_IF_ERROR(expr)             \
  do {                                           \
    ::petrel::Status petrel_status_ = (expr);    \
    if (!petrel_status_.ok()) return petrel_status_; \
  } while (0)

#define PETREL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// `PETREL_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));`
#define PETREL_ASSIGN_OR_RETURN(lhs, expr) \
  PETREL_ASSIGN_OR_RETURN_IMPL(PETREL_CONCAT(petrel_result_, __LINE__), lhs, expr)

// For conditions only a bug can break (never for input data): prints and aborts.
#define PETREL_CHECK(cond)                                                            \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#ifdef NDEBUG
#define PETREL_DCHECK(cond) \
  do {                      \
  } while (0)
#else
#define PETREL_DCHECK(cond) PETREL_CHECK(cond)
#endif
