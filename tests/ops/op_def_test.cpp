// Every op definition, walked: each part an op needs is present and agrees with the others. Type
// inference matches what the CPU kernel returns, the gradient rule matches central finite
// differences in float64 (or the op says why it has none), and a fusible op computes in a fused
// kernel what its eager kernel computes and has a CUDA form. Adding an op means adding its
// definition (ops/graph/defs/) and an example (tests/support/op_examples.hpp); a definition
// without an example fails here.

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "../support/op_examples.hpp"
#include "graph_test_support.hpp"
#include "ops/codegen/cuda_fused.hpp"
#include "ops/elementwise.hpp"
#include "ops/gpu.hpp"
#include "ops/graph/autodiff.hpp"
#include "ops/graph/graph.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/graph/op_def.hpp"
#include "ops/passes/fusion.hpp"

using namespace af;
using namespace af::graph;
using namespace af::testing;

namespace {

// Ops whose values come from where they are made, not from a kernel: nothing to run.
bool structural(const op_def& d) { return d.category == op_category::source || d.category == op_category::fused; }
bool elementwise(const op_def& d) {
  return d.category == op_category::elementwise_unary || d.category == op_category::elementwise_binary;
}

// A graph of parameters for `inputs` feeding one `ex.op` node, and that node.
struct one_op_graph {
  graph_builder b;
  std::vector<node_id> params;
  node_id y = -1;
};

void build(one_op_graph& g, const op_example& ex, const std::vector<tensor>& inputs) {
  for (const auto& t : inputs) g.params.push_back(g.b.parameter({t.type(), t.shape()}));
  auto y = g.b.add(ex.op, g.params, ex.attrs);
  if (!y) FAIL(y.error_value().to_string());
  g.y = *y;
}

// A scalar loss whose derivative differs per element, so a wrong rule cannot hide behind symmetry.
node_id loss_of(graph_builder& b, node_id y) {
  if (b.type_of(y).type != dtype::f64) y = b.add("cast", {y}, {{"dtype", std::string{"f64"}}}).value();
  const node_id half = b.constant(tensor::scalar(0.5)), tilt = b.constant(tensor::scalar(0.3));
  const node_id square = b.add("mul", {b.add("mul", {y, y}).value(), half}).value();
  return b.add("reduce_sum", {b.add("add", {square, b.add("mul", {y, tilt}).value()}).value()}).value();
}

double loss_at(const op_example& ex, const std::vector<tensor>& inputs) {
  one_op_graph g;
  build(g, ex, inputs);
  const node_id l = loss_of(g.b, g.y);
  const af::graph::graph fn = std::move(g.b).finish({l});
  auto values = interpret(fn, inputs);
  if (!values) FAIL(values.error_value().to_string());
  return values->front().item<double>();
}

void check_gradient(const op_def& def, const op_example& ex, const std::vector<tensor>& inputs) {
  one_op_graph g;
  build(g, ex, inputs);
  std::vector<node_id> xs;
  std::vector<std::size_t> positions;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (is_floating(inputs[i].type())) xs.push_back(g.params[i]), positions.push_back(i);
  const node_id l = loss_of(g.b, g.y);
  auto grads = add_gradients(g.b, l, xs);
  switch (def.gradient.what) {
    case gradient_spec::kind::missing: FAIL("op '" << def.name << "' declares no gradient"); return;
    case gradient_spec::kind::unsupported:
      REQUIRE_FALSE(grads);
      CHECK_THAT(grads.error_value().message, Catch::Contains(def.name) && Catch::Contains(def.gradient.why));
      return;
    case gradient_spec::kind::none_flows: {
      if (!grads) FAIL(grads.error_value().to_string());
      if (grads->empty()) return;
      const af::graph::graph fn = std::move(g.b).finish(*grads);
      auto values = interpret(fn, inputs);
      if (!values) FAIL(values.error_value().to_string());
      for (const auto& t : *values)
        for (double v : t.to_vector<double>()) CHECK(v == 0);
      return;
    }
    case gradient_spec::kind::rule: break;
  }
  if (!grads) FAIL(grads.error_value().to_string());
  const bool exact_output = g.b.type_of(g.y).type == dtype::f64;
  const af::graph::graph fn = std::move(g.b).finish(*grads);
  auto analytic = interpret(fn, inputs);
  if (!analytic) FAIL(analytic.error_value().to_string());
  if (!exact_output) return;  // finite differences through a float32 value measure its rounding
  for (std::size_t k = 0; k < positions.size(); ++k) {
    const std::size_t i = positions[k];
    const tensor numeric = numeric_gradient([&](const std::vector<tensor>& at) { return loss_at(ex, at); }, inputs, i);
    check_close((*analytic)[k], numeric, 1e-5, 1e-6, "gradient of input " + std::to_string(i));
  }
}

// The op between a parameter-fed prologue and epilogue, so that the fusion pass has a group to make.
void check_fusion(const op_def& def, const op_example& ex, dtype type, uint64_t seed) {
  INFO("fused in " << to_string(type));
  const auto inputs = make_inputs(ex, type, seed);
  graph_builder b;
  std::vector<node_id> params;
  for (const auto& t : inputs) params.push_back(b.parameter({t.type(), t.shape()}));
  auto y = b.add(def.name, params, ex.attrs);
  REQUIRE(y);
  const node_id scale = b.constant(value_of(cast(tensor::scalar(1.5), type)));
  const node_id scaled = b.add("mul", {*y, scale}).value();
  const af::graph::graph plain = std::move(b).finish({scaled});
  const af::graph::graph fused = fuse_elementwise(plain);
  REQUIRE(fused.count("fused") == 1);
  REQUIRE(fused.count(def.name) == 0);
  const auto eager = interpret(plain, inputs), in_kernel = interpret(fused, inputs);
  if (!eager) FAIL(eager.error_value().to_string());
  if (!in_kernel) FAIL(in_kernel.error_value().to_string());
  check_close(in_kernel->front(), eager->front(), type == dtype::f32 ? 1e-6 : 1e-13, 1e-7);
  for (const auto& n : fused.nodes()) {
    if (n.op != "fused") continue;
    auto source = codegen::emit_cuda(fused.program(static_cast<node_id>(&n - fused.nodes().data())));
    if (!source) FAIL(source.error_value().to_string());
    CHECK_THAT(source->source, Catch::Contains(source->kernel_name));
    if (!gpu::built_with_cuda()) continue;  // NVRTC compiles without a GPU where CUDA is built in
    auto ptx = codegen::compile_cuda(fused.program(static_cast<node_id>(&n - fused.nodes().data())));
    if (!ptx) FAIL(ptx.error_value().to_string());
  }
}

}  // namespace

TEST_CASE("every op definition is complete", "[graph][op_def]") {
  std::set<std::string> with_example;
  for (const auto& ex : examples()) with_example.insert(ex.op);
  for (const op_def* def : all_ops()) {
    INFO("op '" << def->name << "' (" << to_string(def->category) << ")");
    CHECK(def->gradient.what != gradient_spec::kind::missing);
    if (def->gradient.what != gradient_spec::kind::rule) CHECK_FALSE(def->gradient.why.empty());
    CHECK(static_cast<bool>(def->fusion) == elementwise(*def));
    if (structural(*def)) {
      CHECK_FALSE(def->infer);
      CHECK_FALSE(def->cpu_kernel);
      continue;
    }
    CHECK(def->infer);
    CHECK(def->cpu_kernel);
    CHECK(with_example.count(def->name) == 1);  // add the op's example to tests/support/op_examples.hpp
    for (const auto& spec : def->attrs) {
      if (!spec.fallback) continue;
      INFO("default of attribute '" << spec.name << "'");
      auto checked = complete_attrs(*def, op_attrs{{spec.name, *spec.fallback}});
      if (!checked) CHECK_THAT(checked.error_value().message, Catch::Contains("needs attribute"));
    }
  }
  for (const auto& op : with_example) {
    INFO("example for '" << op << "'");
    CHECK(find_op(op) != nullptr);
  }
}

TEST_CASE("each op's kernel returns the type its inference promises", "[graph][op_def]") {
  uint64_t seed = 1;
  for (const auto& ex : examples()) {
    INFO("op '" << ex.op << "' with " << ex.inputs.size() << " inputs");
    const auto inputs = make_inputs(ex, dtype::f64, seed += 8);
    std::vector<value_type> types;
    for (const auto& t : inputs) types.push_back({t.type(), t.shape()});
    auto promised = infer_output(ex.op, types, ex.attrs);
    if (!promised) FAIL(promised.error_value().to_string());
    auto got = default_op_registry()->run(ex.op, inputs, ex.attrs);
    if (!got) FAIL(got.error_value().to_string());
    REQUIRE(got->size() == 1);
    CHECK(got->front().type() == promised->type);
    CHECK(got->front().shape() == promised->dims);
  }
}

TEST_CASE("each op's gradient rule matches finite differences, or the op says why it has none", "[graph][op_def]") {
  uint64_t seed = 100;
  for (const auto& ex : examples()) {
    const op_def* def = find_op(ex.op);
    REQUIRE(def);
    INFO("op '" << ex.op << "'");
    check_gradient(*def, ex, make_inputs(ex, dtype::f64, seed += 8));
  }
}

TEST_CASE("each fusible op computes the same in a fused kernel as alone, and its CUDA form compiles", "[graph][op_def]") {
  uint64_t seed = 500;
  for (const auto& ex : examples()) {
    const op_def* def = find_op(ex.op);
    REQUIRE(def);
    if (!def->fusion) continue;
    INFO("op '" << ex.op << "'");
    for (dtype type : {dtype::f32, dtype::f64}) {
      CHECK(fusible(*def, ex.attrs, type));
      check_fusion(*def, ex, type, seed += 8);
    }
    CHECK_FALSE(fusible(*def, ex.attrs, dtype::i32));
  }
}
