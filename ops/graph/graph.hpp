#pragma once

// The graph IR: one node type {op, dtype, shape, inputs, attrs, device}. Nodes are stored in an
// order where every input comes before its users, so that order is an execution order. A graph is
// immutable once built; passes build a new one.
//
// graph_builder hashes nodes structurally: asking for an op with the same inputs and attributes as
// an existing node returns that node (identical subgraphs are built once). Stateful ops (random)
// and sources are never merged.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/graph/op_def.hpp"
#include "ops/tensor.hpp"

namespace af::graph {

using node_id = int32_t;

struct fused_program;  // ops/passes/fusion.hpp: the ops of a fused group, for codegen

/// What a node is. Executors and passes switch on it, never on the op's name.
enum class node_kind : uint8_t {
  op,         ///< an op's kernel on its inputs
  parameter,  ///< the next argument of a call (graph::parameters() order)
  constant,   ///< a value the graph holds (graph::constant_value)
  fused,      ///< a group of elementwise ops run as one kernel (graph::program)
};

struct node {
  std::string op;  ///< the op's name (def->name): errors, traces and files speak of it
  value_type out;
  std::vector<node_id> inputs;
  op_attrs attrs;
  std::string device;  ///< "" = wherever the executor runs the graph
  /// What the user named it (parameters, variables), or the call site that made it.
  std::string label;
  node_kind kind = node_kind::op;
  /// The op's definition (every node of a built graph has one: parameters, constants and fused
  /// groups are ops of the table too).
  const op_def* def = nullptr;
};

class graph {
 public:
  const std::vector<node>& nodes() const noexcept { return nodes_; }
  const node& at(node_id id) const { return nodes_.at(static_cast<std::size_t>(id)); }
  std::size_t size() const noexcept { return nodes_.size(); }
  /// Parameter nodes in call order.
  const std::vector<node_id>& parameters() const noexcept { return parameters_; }
  const std::vector<node_id>& outputs() const noexcept { return outputs_; }
  /// The name of each output, in order (given to finish(), else "output_0", "output_1", ...). A
  /// parameter's name is its node's label.
  const std::vector<std::string>& output_names() const noexcept { return output_names_; }
  /// The value of a "constant" node.
  const tensor& constant_value(node_id id) const;
  /// The program of a "fused" node.
  const fused_program& program(node_id id) const;
  const std::shared_ptr<const fused_program>& shared_program(node_id id) const { return programs_.at(id); }
  /// Nodes of each op kind ("fused" -> 1, ...), for tests and reports.
  std::size_t count(std::string_view op) const;

  /// Graphviz text: one box per node labelled with its op and output type.
  std::string to_dot(const std::string& name = "graph") const;
  /// Checks that inputs precede users, arities and every node's recorded type against
  /// infer_output; invalid_argument naming the first node that disagrees.
  expected<void> verify() const;

 private:
  friend class graph_builder;
  std::vector<node> nodes_;
  std::vector<node_id> parameters_;
  std::vector<node_id> outputs_;
  std::vector<std::string> output_names_;
  std::unordered_map<node_id, tensor> constants_;
  std::unordered_map<node_id, std::shared_ptr<const fused_program>> programs_;
};

class graph_builder {
 public:
  /// The next input of the graph.
  node_id parameter(value_type type, std::string label = {});
  /// A constant; equal constants (same dtype, shape and bytes) are one node.
  node_id constant(const tensor& value);
  /// An op on existing nodes (not "parameter", "constant" or "fused": those have their own calls).
  /// Its type comes from infer_output; errors name the op and the input types. An identical existing node is returned instead of a new one (unless stateful).
  expected<node_id> add(const std::string& op, std::vector<node_id> inputs, op_attrs attrs = {}, std::string label = {});
  /// A fused group (made by the fusion pass): inputs, the program and its output type.
  node_id add_fused(std::vector<node_id> inputs, std::shared_ptr<const fused_program> program, value_type out,
                    std::string label = {}, std::string device = {});
  /// Copies a node of another graph whose inputs were already mapped to this builder's nodes.
  expected<node_id> copy(const graph& from, node_id id, std::vector<node_id> inputs);

  /// The device that nodes added from now on are placed on ("" = wherever the executor runs the
  /// graph). Equal ops on different devices stay separate nodes.
  void place_on(std::string device) { device_ = std::move(device); }
  const std::string& placement() const noexcept { return device_; }

  const value_type& type_of(node_id id) const { return g_.at(id).out; }
  const node& at(node_id id) const { return g_.at(id); }
  const tensor& constant_value(node_id id) const { return g_.constant_value(id); }
  std::size_t size() const noexcept { return g_.size(); }
  /// Ends building: the graph computes `outputs`, named `names` (one per output; empty: numbered).
  graph finish(std::vector<node_id> outputs, std::vector<std::string> names = {}) &&;

  /// Called with each new node from add() and constant() (not for parameters or fused nodes, nor
  /// when add() returns an existing equal node); its error becomes add()'s. Eager execution
  /// (gradient_tape) computes each value here, as the op is written.
  using observer = std::function<expected<void>(const graph_builder&, node_id)>;
  void observe(observer fn) { observer_ = std::move(fn); }

 private:
  node_id append(node n);
  expected<node_id> observed(node_id id);
  observer observer_;
  std::string device_;
  graph g_;
  std::unordered_map<std::size_t, std::vector<node_id>> by_hash_;
};

}  // namespace af::graph
