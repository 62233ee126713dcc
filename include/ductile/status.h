// Status and Result<T>: how every ductile call reports failure.
//
// No exception crosses a ductile API. A call returns a Status (or a
// Result<T> holding either a value or a non-OK Status). Each code has one
// meaning, which tells the caller what to do next:
//
//   kCancelled          the caller, or a shutdown of this process's side,
//                       stopped the operation (client closed, coordinator
//                       stopped, a signal).
//   kInvalidArgument    the request itself is wrong (arguments, a malformed
//                       or out-of-range message): do not retry it as is.
//   kDeadlineExceeded   a bounded wait (reply, barrier, staleness bound)
//                       ran out; the operation may still complete later.
//   kNotFound           a named thing (table, member) does not exist.
//   kAlreadyExists      the name or id is taken (by something different).
//   kPermissionDenied   the caller may not do this: an admin operation
//                       without the admin key, a secret key file others
//                       can read.
//   kResourceExhausted  out of a resource: disk, memory, device memory.
//   kFailedPrecondition the system is not in a state that allows the call
//                       (no state directory, not registered as a worker,
//                       an unusable directory): do not retry until that
//                       changes.
//   kAborted            a failure in the cluster interrupted the operation
//                       (a member died; for a worker: the job rolled back
//                       to a checkpoint). A worker takes the rollback with
//                       Client::AwaitRecovery() and resumes from there.
//   kInternal           a broken invariant, or a peer that broke the
//                       protocol (a reply of the wrong size).
//   kUnavailable        a peer is not reachable or not ready right now (or
//                       another change is in progress): retry the call.
//
// Example:
//   ductile::Result<ductile::TableId> t = client->CreateTable(options);
//   if (!t.ok()) { LOG(ERROR) << t.status(); return; }
//   DUCTILE_RETURN_IF_ERROR(client->Push(*t, keys, values));
//
//   // In a function returning Status or Result<U>:
//   DUCTILE_ASSIGN_OR_RETURN(ductile::TableId id, client->CreateTable(o));
#ifndef DUCTILE_STATUS_H_
#define DUCTILE_STATUS_H_

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace ductile {

// Part of the wire format (sent in error replies): never renumber.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kInternal = 13,
  kUnavailable = 14,
};

inline std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kUnavailable:
      return "Unavailable";
  }
  return "Unknown";
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "InvalidArgument: keys are not sorted", or "OK".
  std::string ToString() const {
    if (ok()) return "OK";
    return std::string(StatusCodeName(code_)) + ": " + message_;
  }

  // Marks a status as deliberately not inspected.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) {
  return os << s.ToString();
}

inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFoundError(std::string m) {
  return Status(StatusCode::kNotFound, std::move(m));
}
inline Status AlreadyExistsError(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
inline Status PermissionDeniedError(std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(m));
}
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status UnavailableError(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status DeadlineExceededError(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
inline Status AbortedError(std::string m) {
  return Status(StatusCode::kAborted, std::move(m));
}
inline Status InternalError(std::string m) {
  return Status(StatusCode::kInternal, std::move(m));
}
inline Status ResourceExhaustedError(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status CancelledError(std::string m) {
  return Status(StatusCode::kCancelled, std::move(m));
}

namespace internal {
// Prints `status` and aborts: reading the value of a failed Result.
[[noreturn]] inline void DieOfBadResultAccess(const Status& status) {
  std::fprintf(stderr,
               "ductile: the value of a failed Result was read; its status: "
               "%s\n",
               status.ToString().c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace internal

// Either a T or a non-OK Status. Reading the value of a failed Result
// (value(), *, ->) aborts the process with the status message, like
// absl::StatusOr::value(): check ok() first.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = InternalError("Result built from an OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { return Checked(); }
  const T& value() const& { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return Checked(); }
  T&& operator*() && { return std::move(Checked()); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &Checked(); }

 private:
  T& Checked() {
    if (!value_) internal::DieOfBadResultAccess(status_);
    return *value_;
  }
  const T& Checked() const {
    if (!value_) internal::DieOfBadResultAccess(status_);
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace ductile

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define DUCTILE_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::ductile::Status ductile_status_ = (expr);        \
    if (!ductile_status_.ok()) return ductile_status_; \
  } while (0)

// `lhs = value of rexpr` (a Result<T>), or returns its status from the
// enclosing function. `lhs` may declare a variable:
//   DUCTILE_ASSIGN_OR_RETURN(auto table, client->CreateTable(options));
#define DUCTILE_ASSIGN_OR_RETURN(lhs, rexpr)                                 \
  DUCTILE_ASSIGN_OR_RETURN_IMPL_(DUCTILE_CONCAT_(ductile_result_, __LINE__), \
                                 lhs, rexpr)

#define DUCTILE_ASSIGN_OR_RETURN_IMPL_(result, lhs, rexpr) \
  auto result = (rexpr);                                   \
  if (!result.ok()) return result.status();                \
  lhs = std::move(result).value()
#define DUCTILE_CONCAT_(a, b) DUCTILE_CONCAT_INNER_(a, b)
#define DUCTILE_CONCAT_INNER_(a, b) a##b

#endif  // DUCTILE_STATUS_H_
