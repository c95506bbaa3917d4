// Status and Result<T>: how library and service code reports errors. Exceptions never cross a
// module boundary; a failed call says what was wrong (field, value, what is allowed).
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace fp8rt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kCorruption,
  kIOError,
  kUnavailable,
  kPermissionDenied,
  kUnauthenticated,
  kResourceExhausted,
  kCancelled,
  kUnimplemented,
  kInternal,
  kNonFinite,  // a NaN or infinity where a finite number must be (a training loss)
  kCheckpointFailed,  // a checkpoint could not be written (train.on_checkpoint_error: stop)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status NonFinite(std::string m) { return {StatusCode::kNonFinite, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: gemm: K=17 is not a multiple of 16".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that says why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// Concatenates its arguments with operator<< (keeps kernels/ free of a format library).
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace fp8rt

#define FP8RT_RETURN_IF_ERROR(expr)              \
  do {                                           \
    ::fp8rt::Status fp8rt_status_ = (expr);      \
    if (!fp8rt_status_.ok()) return fp8rt_status_; \
  } while (0)

#define FP8RT_CONCAT_INNER_(a, b) a##b
#define FP8RT_CONCAT_(a, b) FP8RT_CONCAT_INNER_(a, b)
#define FP8RT_ASSIGN_OR_RETURN(lhs, expr) \
  FP8RT_ASSIGN_OR_RETURN_IMPL_(FP8RT_CONCAT_(fp8rt_result_, __LINE__), lhs, expr)
#define FP8RT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
