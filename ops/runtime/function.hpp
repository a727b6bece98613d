#pragma once

// af::function: the tf.function of actorflow. A C++ callable written on symbolic tensors (af::sym)
// is traced once per input signature into a graph, optimised (passes, then the verifier after
// each) and run. A call with a signature seen before reuses its graph; a new one retraces, and
// trace_count() says how often that happened.
//
//   af::function f{[](const std::vector<af::sym>& in) {
//     return std::vector<af::sym>{af::gelu(in[0] * in[1] + in[2]) * in[3]};
//   }};
//   auto y = f({x, a, b, c});  // traces on the first call, then runs one fused kernel
//
// Shapes that do not fit (a matmul of [2,3] and [4,5]) fail the trace with an error naming the op,
// both shapes and the source line of the call.

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "ops/graph/graph.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/nn.hpp"

namespace af {

/// A symbolic tensor while a function is traced: a node of the graph being built.
class sym {
 public:
  sym(graph::graph_builder* builder, graph::node_id id) : builder_(builder), id_(id) {}
  /// Copies: the builder's storage moves as the trace grows.
  graph::value_type type() const { return builder_->type_of(id_); }
  dtype dtype_of() const { return builder_->type_of(id_).type; }
  shape dims() const { return builder_->type_of(id_).dims; }
  graph::node_id id() const noexcept { return id_; }
  graph::graph_builder* builder() const noexcept { return builder_; }

 private:
  graph::graph_builder* builder_;
  graph::node_id id_;
};

/// Thrown inside a traced callable when an op does not fit its inputs; af::function turns it into
/// the error its call returns.
class trace_error : public std::exception {
 public:
  explicit trace_error(error err) : err_(std::move(err)) {}
  const char* what() const noexcept override { return err_.message.c_str(); }
  const error& err() const noexcept { return err_; }

 private:
  error err_;
};

#if defined(__cpp_lib_source_location)
using where_from = std::source_location;
#else
/// clang before 15 lacks __builtin_source_location, so libstdc++'s <source_location> is empty under
/// it (the fuzz tree builds with clang 14). The two facts we report come from builtins that, as
/// default arguments, name the call site just as std::source_location::current() does.
class where_from {
 public:
  static constexpr where_from current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) noexcept {
    return where_from(file, line);
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }

 private:
  constexpr where_from(const char* file, unsigned line) noexcept : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};
#endif

/// Throws the trace_error of a check that failed in a call made at `from`: the message ends in
/// "(at file.cpp:12)". For functions that build on syms (losses, optimizers) and check their inputs.
[[noreturn]] void fail_trace(errc code, const std::string& message, const where_from& from);

/// Any op of the graph op table on symbolic inputs (the named helpers below call this).
sym apply(const std::string& op, const std::vector<sym>& inputs, op_attrs attrs = {},
          where_from from = where_from::current());
/// A constant of `like`'s dtype (a scalar broadcast where used).
sym constant_like(const sym& like, double value);
/// `value` as a constant of the trace `in_trace_of` belongs to (indices, masks, tables).
sym constant(const sym& in_trace_of, const tensor& value);

sym operator+(const sym& a, const sym& b);
sym operator-(const sym& a, const sym& b);
sym operator*(const sym& a, const sym& b);
sym operator/(const sym& a, const sym& b);
sym operator-(const sym& a);
sym operator+(const sym& a, double b);
sym operator-(const sym& a, double b);
sym operator*(const sym& a, double b);
sym operator/(const sym& a, double b);
sym operator+(double a, const sym& b);
sym operator-(double a, const sym& b);
sym operator*(double a, const sym& b);
sym operator/(double a, const sym& b);

sym maximum(const sym& a, const sym& b, where_from from = where_from::current());
sym minimum(const sym& a, const sym& b, where_from from = where_from::current());
sym pow(const sym& a, const sym& b, where_from from = where_from::current());
sym abs(const sym& x, where_from from = where_from::current());
sym relu(const sym& x, where_from from = where_from::current());
sym exp(const sym& x, where_from from = where_from::current());
sym log(const sym& x, where_from from = where_from::current());
sym sqrt(const sym& x, where_from from = where_from::current());
sym rsqrt(const sym& x, where_from from = where_from::current());
sym tanh(const sym& x, where_from from = where_from::current());
sym sigmoid(const sym& x, where_from from = where_from::current());
sym erf(const sym& x, where_from from = where_from::current());
sym where(const sym& condition, const sym& a, const sym& b, where_from from = where_from::current());
sym greater(const sym& a, const sym& b, where_from from = where_from::current());
sym less(const sym& a, const sym& b, where_from from = where_from::current());
sym gelu(const sym& x, bool approximate = false, where_from from = where_from::current());
sym cast(const sym& x, dtype to, where_from from = where_from::current());
sym matmul(const sym& a, const sym& b, bool transpose_a = false, bool transpose_b = false,
           where_from from = where_from::current());
sym conv2d(const sym& input, const sym& filter, const conv2d_options& options = {},
           where_from from = where_from::current());
sym max_pool2d(const sym& x, const pool_options& options = {}, where_from from = where_from::current());
sym avg_pool2d(const sym& x, const pool_options& options = {}, where_from from = where_from::current());
sym reduce_sum(const sym& x, std::vector<int64_t> axes = {}, bool keepdims = false, where_from from = where_from::current());
sym reduce_mean(const sym& x, std::vector<int64_t> axes = {}, bool keepdims = false, where_from from = where_from::current());
sym reduce_max(const sym& x, std::vector<int64_t> axes = {}, bool keepdims = false, where_from from = where_from::current());
sym softmax(const sym& x, int64_t axis = -1, where_from from = where_from::current());
sym log_softmax(const sym& x, int64_t axis = -1, where_from from = where_from::current());
sym reshape(const sym& x, std::vector<int64_t> dims, where_from from = where_from::current());
sym slice(const sym& x, int64_t axis, int64_t start, int64_t stop, int64_t step = 1, where_from from = where_from::current());
sym concat(const std::vector<sym>& parts, int64_t axis, where_from from = where_from::current());
sym stack(const std::vector<sym>& parts, int64_t axis, where_from from = where_from::current());
sym gather(const sym& params, const sym& indices, int64_t axis = 0, where_from from = where_from::current());
sym one_hot(const sym& indices, int64_t depth, dtype type = dtype::f32, where_from from = where_from::current());
/// Uniform [0, 1) of shape `dims`, determined by the i64 scalar `seed` and `salt` (no gradient):
/// a graph fed a new seed per call draws new numbers without retracing (dropout masks).
sym stateless_random_uniform(const sym& seed, std::vector<int64_t> dims, int64_t salt = 0, dtype type = dtype::f32,
                             where_from from = where_from::current());
sym transpose(const sym& x, std::vector<int64_t> perm, where_from from = where_from::current());
sym broadcast_to(const sym& x, std::vector<int64_t> dims, where_from from = where_from::current());

/// Places the ops traced while it lives on `device` ("cpu:1"; the executor maps names to devices),
/// as `with tf.device(...)` does; the trace's previous placement holds again when it ends. Gradient
/// ops go where their forward op is. A device of a kind no backend serves, or an op traced on a
/// device that has no kernel for it, fails the trace there (ops/runtime/backend.hpp).
class device_scope {
 public:
  device_scope(const sym& in_trace_of, std::string device);
  ~device_scope();
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  graph::graph_builder* builder_;
  std::string previous_;
};

/// d sum(y) / d x for each x, as part of the trace (reverse mode; see ops/graph/autodiff.hpp). A
/// value with no gradient rule on the way fails the trace naming the op.
std::vector<sym> gradients(const sym& y, const std::vector<sym>& xs, where_from from = where_from::current());

struct function_options {
  /// Fixes the signature (dims may be -1): one trace serves every call that fits. Without it,
  /// each new combination of dtypes and shapes traces again.
  std::optional<std::vector<graph::value_type>> input_signature;
  /// Run the passes (fusion); false keeps the graph as traced.
  bool optimize = true;
  /// The names of the traced graph's inputs and outputs, which a saved signature shows (empty:
  /// "arg0", "arg1", ... and "output_0", ...). Their counts must match the calls' when given.
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
};

/// A traced, optimised graph ready to run.
struct concrete_function {
  std::vector<graph::value_type> signature;
  graph::graph traced;     ///< as the callable built it
  graph::graph optimized;  ///< after the passes; what runs
};

class function {
 public:
  using body = std::function<std::vector<sym>(const std::vector<sym>&)>;

  explicit function(body fn, function_options options = {});

  /// Runs the function on `args`, tracing first when their signature is new.
  expected<std::vector<tensor>> operator()(const std::vector<tensor>& args);
  /// The same, handing each output to `on_output` as soon as it is computed (graph::interpret).
  expected<std::vector<tensor>> call(const std::vector<tensor>& args, const graph::output_ready& on_output);
  /// The graph for a signature: the cached one, or a new trace.
  expected<std::shared_ptr<const concrete_function>> concrete(const std::vector<graph::value_type>& signature);
  /// How many times the callable has been traced.
  int64_t trace_count() const;

 private:
  body fn_;
  function_options options_;
  mutable std::mutex mtx_;
  std::vector<std::shared_ptr<const concrete_function>> cache_;
  int64_t traces_ = 0;
};

/// Traces `fn` on parameters of `signature` into a graph (no passes), its inputs and outputs named
/// as given (function_options). (Not `trace`: that is the namespace of the span recorder,
/// actors/tracing.hpp.)
expected<graph::graph> trace_graph(const function::body& fn, const std::vector<graph::value_type>& signature,
                                   const std::vector<std::string>& input_names = {},
                                   const std::vector<std::string>& output_names = {});

}  // namespace af
