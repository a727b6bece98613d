#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace af {

/// The project's one error enum. Expected failures are values of this type plus a context string that
/// names what was wrong and where (op and shapes, file and offset, request id, peer).
enum class errc : uint8_t {
  none = 0,
  invalid_argument,  ///< an argument is out of its domain (negative axis count, bad stride, ...)
  shape_mismatch,    ///< shapes cannot be broadcast or multiplied together
  dtype_mismatch,    ///< an op got a dtype it does not support, or two that do not agree
  unknown_dtype,     ///< a dtype name or code that actorflow does not know
  out_of_memory,     ///< an allocation would exceed the device's memory limit
  out_of_range,      ///< an index (gather, slice, one-hot) outside its dimension
  malformed_input,   ///< bytes that do not parse (wire header, file, message)
  io_error,          ///< the operating system refused a read, write or connection
  peer_down,         ///< a remote node died or became unreachable with requests pending
  timeout,           ///< a request was not answered in time
  cancelled,         ///< the consumer cancelled the stream
  protocol_violation,///< a peer broke the flow-control protocol (sent more than its credit, ...)
  unsupported,       ///< the operation exists but not for this device, dtype or build
  resource_exhausted,///< a bounded queue is full: try again later (a server's 429)
  not_found,         ///< a named thing (model, version, signature, key) does not exist (a server's 404)
  internal,          ///< a failure inside that is not the caller's fault (a model that threw: a server's 500)
  failed_precondition,///< the thing exists but cannot serve this request as asked (a model without the signature named)
};

/// Short stable name of an error code ("shape_mismatch").
const char* to_string(errc code) noexcept;

/// An error code with its context.
struct error {
  errc code = errc::none;
  std::string message;

  explicit operator bool() const noexcept { return code != errc::none; }
  /// "shape_mismatch: add: cannot broadcast [2,3] with [4]"
  std::string to_string() const;
};

inline error make_error(errc code, std::string message) { return error{code, std::move(message)}; }

/// A value or an error, in the spirit of C++23's std::expected (unavailable in C++20).
template <class T>
class expected {
 public:
  expected(T value) : state_(std::move(value)) {}
  expected(error err) : state_(std::move(err)) {}

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const error& error_value() const& { return std::get<1>(state_); }
  error&& error_value() && { return std::get<1>(std::move(state_)); }

 private:
  std::variant<T, error> state_;
};

/// expected<void>: success or an error.
template <>
class expected<void> {
 public:
  expected() = default;
  expected(error err) : error_(std::move(err)) {}
  bool has_value() const noexcept { return !error_; }
  explicit operator bool() const noexcept { return has_value(); }
  const error& error_value() const& { return error_; }
  error&& error_value() && { return std::move(error_); }

 private:
  error error_;
};

/// `err` with `context` in front: "matmul of f32[2,3]" + "node 7 (matmul)" gives "node 7 (matmul):
/// matmul of f32[2,3]"; the code stays. The one way errors gain the where of a caller.
error with_context(error err, std::string_view context);

/// Calls `fn` (user code, a kernel); what it throws becomes an error instead of crossing into the
/// runtime: std::bad_alloc is out_of_memory, anything else invalid_argument, each "<what> threw:
/// <why>". `fn` returns an expected<T> (or an error-convertible value).
template <class F>
auto guarded(std::string_view what, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, std::string{what} + " threw: out of memory");
  } catch (const std::exception& ex) {
    return make_error(errc::invalid_argument, std::string{what} + " threw: " + ex.what());
  } catch (...) {
    return make_error(errc::invalid_argument, std::string{what} + " threw a non-standard exception");
  }
}

}  // namespace af

/// Propagate the error of an expected<T> expression, otherwise bind its value.
#define AF_TRY_ASSIGN(lhs, expr)                        \
  auto AF_CONCAT_(af_try_, __LINE__) = (expr);          \
  if (!AF_CONCAT_(af_try_, __LINE__))                   \
    return std::move(AF_CONCAT_(af_try_, __LINE__)).error_value(); \
  lhs = std::move(AF_CONCAT_(af_try_, __LINE__)).value()
#define AF_TRY(expr)                                               \
  do {                                                             \
    auto af_try_status_ = (expr);                                  \
    if (!af_try_status_) return std::move(af_try_status_).error_value(); \
  } while (false)
#define AF_CONCAT_(a, b) AF_CONCAT_IMPL_(a, b)
#define AF_CONCAT_IMPL_(a, b) a##b
