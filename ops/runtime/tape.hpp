#pragma once

// Eager execution with a gradient tape, the debuggable path (like running tf.functions eagerly):
// every op written on the tape's values runs at once on the CPU kernels, so a value, or the error
// of a shape that does not fit (thrown as af::trace_error), is there on the line that made it. The tape records the same ops
// as a trace would, so gradient() applies the graph's reverse-mode rules, and the gradients are
// computed eagerly as well.
//
//   af::gradient_tape tape;
//   af::sym w = tape.watch(w0), x = tape.constant(x0);
//   af::sym loss = af::reduce_mean(af::relu(af::matmul(x, w)));
//   std::cout << tape.value(loss).to_string();            // already computed
//   auto grads = tape.gradient(loss, {w});                // d loss / d w, as tensors

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/runtime/function.hpp"

namespace af {

class gradient_tape {
 public:
  gradient_tape();
  gradient_tape(const gradient_tape&) = delete;
  gradient_tape& operator=(const gradient_tape&) = delete;

  /// A value gradients may be taken with respect to.
  sym watch(const tensor& value, std::string name = {});
  /// A value that is only read (inputs, labels).
  sym constant(const tensor& value);
  /// The computed value of anything written on this tape.
  const tensor& value(const sym& s) const;
  /// d sum(y) / d x for each x, computed now.
  expected<std::vector<tensor>> gradient(const sym& y, const std::vector<sym>& xs);
  /// The ops recorded so far, as a graph whose outputs are `outputs` (for to_dot or to compile).
  graph::graph recorded(const std::vector<sym>& outputs) const;

 private:
  std::unique_ptr<graph::graph_builder> builder_;
  std::unordered_map<graph::node_id, tensor> values_;
};

}  // namespace af
