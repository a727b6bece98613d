#pragma once

// A device as the runtime sees it (in the spirit of ggml's backends): its memory, its kernel table,
// a runner for fused programs, copies to and from host memory, an in-order queue and its
// properties. Executors (the interpreter, af::graph_executor, the device actors) dispatch every
// node through a backend, fused nodes included, and never call kernels themselves. The CPU backend
// is always there and is the reference; it is the only one so far (no CUDA backend yet).
//
//   auto cpu = af::make_cpu_backend({.name = "cpu:1", .memory = big_allocator});
//   auto y = cpu->run_node(node, program, inputs);  // a graph node on this device
//
// Device kinds are named by the prefix of a placement ("cpu:1" -> "cpu"). Each kind registers what
// it can run, so that tracing inside af::device_scope fails at once, naming the op and the device,
// when that device has no kernel for the op.

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ops/allocator.hpp"
#include "ops/device.hpp"
#include "ops/graph/fused_program.hpp"
#include "ops/graph/graph.hpp"
#include "ops/op_registry.hpp"

namespace af {

struct backend_properties {
  std::string name;         ///< the placement it answers to: "cpu:0"
  device where;             ///< where its tensors live
  std::string description;  ///< "CPU, 16 threads, AVX-512" for logs
  /// Its tensors live in host memory: another host-memory device reads them without a copy.
  bool host_memory = true;
};

class backend {
 public:
  virtual ~backend() = default;

  virtual const backend_properties& properties() const noexcept = 0;
  /// Holds the outputs and temporaries of what runs here; its limit bounds them.
  virtual const std::shared_ptr<allocator>& memory() const noexcept = 0;
  /// Whether this device has a kernel for `op` (sources and fused nodes: whether it runs them).
  virtual bool supports(const graph::op_def& op) const = 0;

  /// One op's kernel on inputs that live here; errors name the op.
  virtual expected<std::vector<tensor>> run(const std::string& op, const std::vector<tensor>& inputs,
                                            const op_attrs& attrs) = 0;
  /// A fused program on inputs that live here. `reuse`: an input nobody else holds, which may take
  /// the output in place.
  virtual expected<tensor> run_fused(const graph::fused_program& program, const std::vector<tensor>& inputs,
                                     const tensor* reuse = nullptr) = 0;

  /// `t` (in host memory) as a tensor of this device, and back. Host-memory devices return `t`.
  virtual expected<tensor> from_host(const tensor& t) = 0;
  virtual expected<tensor> to_host(const tensor& t) = 0;
  /// Work runs in submission order; returns once all of it has finished (the CPU runs each call to
  /// completion, so there is nothing to wait for).
  virtual expected<void> synchronize() = 0;

  /// A graph node: its op's kernel, or `program` for a fused node.
  expected<tensor> run_node(const graph::node& n, const graph::fused_program* program,
                            const std::vector<tensor>& inputs, const tensor* reuse = nullptr);
};

struct cpu_backend_options {
  std::string name = "cpu:0";
  /// Null: whatever CPU allocator is current when each kernel runs (af::allocator_scope).
  std::shared_ptr<allocator> memory;
  /// Null: every op definition's CPU kernel (default_op_registry()).
  std::shared_ptr<const op_registry> kernels;
};

std::shared_ptr<backend> make_cpu_backend(cpu_backend_options options = {});

/// The CPU backend "cpu:0" on the default allocator and kernels, made on first use.
backend& default_cpu_backend();

// -- device kinds ---------------------------------------------------------------------------------

/// What a kind of device can run, for placement checks while tracing.
using op_support = std::function<bool(const graph::op_def&)>;

/// Registers a kind ("cuda") with what it runs; the CPU kind is always registered.
void register_device_kind(std::string kind, op_support supports);

/// ok when `device` ("cpu:1") is of a registered kind ("" = wherever the executor runs the graph);
/// unsupported naming the device and the kinds there are.
expected<void> check_device_kind(std::string_view device);
/// ok when a node of `op` may be placed on `device`; unsupported naming both when the kind is
/// unknown or has no kernel for the op.
expected<void> check_placement(std::string_view device, const graph::op_def& op);

}  // namespace af
