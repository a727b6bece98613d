// Each pass keeps results and does what its rule says on graphs made for it.

#include <catch2/catch.hpp>

#include "graph_test_support.hpp"
#include "ops/codegen/cpu_fused.hpp"
#include "ops/runtime/function.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/passes/fusion.hpp"
#include "ops/passes/memory_plan.hpp"
#include "ops/passes/placement.hpp"
#include "ops/passes/passes.hpp"

using namespace af;
using af::graph::value_type;
using graph_t = af::graph::graph;
using namespace af::graph;
using syms = std::vector<sym>;

namespace {

graph_t traced(const function::body& fn, const std::vector<value_type>& signature) {
  auto g = trace_graph(fn, signature);
  if (!g) FAIL(g.error_value().to_string());
  REQUIRE(g->verify());
  return std::move(*g);
}

// The pass's graph verifies and computes what the original computes.
void check_preserves(const graph_t& before, const graph_t& after, const std::vector<tensor>& args) {
  REQUIRE(after.verify());
  auto want = interpret(before, args), got = interpret(after, args);
  REQUIRE(want);
  REQUIRE(got);
  REQUIRE(want->size() == got->size());
  for (std::size_t i = 0; i < want->size(); ++i) check_close((*got)[i], (*want)[i], 1e-12, 1e-14);
}

std::size_t compute_nodes(const graph_t& g) {
  std::size_t n = 0;
  for (const auto& x : g.nodes()) n += (x.op == "parameter" || x.op == "constant") ? 0 : 1;
  return n;
}

}  // namespace

TEST_CASE("constant folding computes constant subgraphs once", "[graph][passes]") {
  const auto g = traced([](const syms& in) {
    auto c = constant_like(in[0], 3.0);
    auto k = exp(c * 2.0) + sqrt(c);  // no parameter involved: one constant
    return syms{in[0] * k};
  }, {{dtype::f64, {5}}});
  const auto folded = fold_constants(g);
  check_preserves(g, folded, {random_tensor({5}, 1, dtype::f64)});
  CHECK(compute_nodes(eliminate_dead_code(folded)) == 1);  // only the final mul is left to run
  CHECK(compute_nodes(g) == 5);
}

TEST_CASE("algebraic simplification drops identities and collapses transposes", "[graph][passes]") {
  const auto g = traced([](const syms& in) {
    auto x = (in[0] * 1.0 + 0.0 - 0.0) / 1.0;
    auto back = transpose(transpose(x, {1, 0, 2}), {1, 0, 2});
    auto rotated = transpose(transpose(x, {1, 0, 2}), {0, 2, 1});
    return syms{-(-back), rotated};
  }, {{dtype::f64, {2, 3, 4}}});
  const auto simple = eliminate_dead_code(simplify_algebra(g));
  check_preserves(g, simple, {random_tensor({2, 3, 4}, 2, dtype::f64)});
  CHECK(simple.outputs()[0] == simple.parameters()[0]);  // everything on the first output cancels
  CHECK(simple.count("transpose") == 1);                 // the second output needs one, composed
  CHECK(simple.count("mul") + simple.count("add") + simple.count("sub") + simple.count("div") + simple.count("neg") == 0);
}

TEST_CASE("identities that would change a type are kept", "[graph][passes]") {
  // x[3] * ones[2,3] broadcasts: dropping the multiply would change the output shape.
  const auto g = traced([](const syms& in) { return syms{in[0] * broadcast_to(constant_like(in[0], 1.0), {2, 3})}; },
                        {{dtype::f64, {3}}});
  const auto simple = simplify_algebra(fold_constants(g));
  check_preserves(g, simple, {random_tensor({3}, 3, dtype::f64)});
  CHECK(simple.at(simple.outputs()[0]).out.dims == shape{2, 3});
}

TEST_CASE("common subexpressions made equal by other passes become one node", "[graph][passes]") {
  const auto g = traced([](const syms& in) { return syms{exp(in[0] * 1.0) + exp(in[0])}; }, {{dtype::f64, {4}}});
  CHECK(g.count("exp") == 2);
  const auto once = eliminate_dead_code(eliminate_common_subexpressions(simplify_algebra(g)));
  check_preserves(g, once, {random_tensor({4}, 4, dtype::f64)});
  CHECK(once.count("exp") == 1);
}

TEST_CASE("dead code goes, parameters stay", "[graph][passes]") {
  const auto g = traced([](const syms& in) {
    auto unused = matmul(in[0], in[0], false, true);
    (void)unused;
    return syms{relu(in[0])};
  }, {{dtype::f64, {3, 3}}, {dtype::f64, {7}}});
  const auto live = eliminate_dead_code(g);
  check_preserves(g, live, {random_tensor({3, 3}, 5, dtype::f64), random_tensor({7}, 6, dtype::f64)});
  CHECK(g.count("matmul") == 1);
  CHECK(live.count("matmul") == 0);
  CHECK(live.parameters().size() == 2);
}

TEST_CASE("the optimize pipeline keeps results and names a pass in its errors", "[graph][passes]") {
  const auto g = traced([](const syms& in) {
    auto h = relu(matmul(in[0], in[1]) * 1.0 + in[2]);
    auto c = constant_like(in[0], 2.0);
    return syms{softmax(h * (c * c)) + 0.0};
  }, {{dtype::f64, {4, 5}}, {dtype::f64, {5, 6}}, {dtype::f64, {6}}});
  auto optimized = optimize(g);
  REQUIRE(optimized);
  check_preserves(g, *optimized, {random_tensor({4, 5}, 7, dtype::f64), random_tensor({5, 6}, 8, dtype::f64),
                                  random_tensor({6}, 9, dtype::f64)});
  // c*c folds to 4; * 1.0 and + 0.0 go; the bias add, relu and scale by 4 are one kernel.
  CHECK(optimized->count("fused") == 1);
  CHECK(compute_nodes(*optimized) == 3);  // matmul, the kernel, softmax
}

TEST_CASE("the verifier runs after each pass, and its error names the pass", "[graph][passes]") {
  // A fused node whose declared shape disagrees with its program: the first pass keeps it, and the
  // verifier after that pass refuses the result.
  auto optimized = optimize(graph_with_inconsistent_fused_node());
  REQUIRE_FALSE(optimized);
  CHECK_THAT(optimized.error_value().to_string(), Catch::Contains("after constant folding") && Catch::Contains("fused"));
}

TEST_CASE("the memory plan shares buffers between values whose lifetimes do not overlap", "[graph][passes]") {
  // A chain of 6 unfused ops on 1 MiB values needs two buffers, not six.
  const auto g = traced([](const syms& in) {
    auto x = in[0];
    for (int i = 0; i < 3; ++i) x = matmul(relu(x), in[1]);
    return syms{x};
  }, {{dtype::f32, {512, 512}}, {dtype::f32, {512, 512}}});
  auto plan = plan_memory(g);
  REQUIRE(plan);
  const std::size_t one = 512 * 512 * 4;
  CHECK(plan->unshared_bytes == 6 * one);
  CHECK(plan->planned_bytes == 2 * one);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool owns = g.nodes()[i].op != "parameter" && g.nodes()[i].op != "constant";
    CHECK((plan->buffer_of[i] >= 0) == owns);
  }
  // Views share their input's buffer and keep it alive; unknown sizes cannot be planned.
  const auto with_view = traced([](const syms& in) { return syms{exp(transpose(exp(in[0]), {1, 0})) + 1.0}; },
                                {{dtype::f32, {4, 8}}});
  auto view_plan = plan_memory(with_view);
  REQUIRE(view_plan);
  CHECK(view_plan->planned_bytes == 2 * 4 * 8 * 4);
  CHECK_FALSE(plan_memory(traced([](const syms& in) { return syms{exp(in[0])}; }, {{dtype::f32, {-1, 3}}})));
}

TEST_CASE("a fused kernel writes into an input it reads for the last time", "[graph][passes]") {
  function fn{[](const syms& in) { return syms{gelu(exp(in[0] * 2.0) * 0.5 + 1.0)}; }};
  // exp(x*2) is its own node when it is also an output; here the chain after it fuses and can
  // take over its buffer.
  function two_stage{[](const syms& in) {
    auto e = matmul(in[0], in[1]);
    return syms{gelu(e * 0.5 + 1.0)};
  }};
  auto c = two_stage.concrete({{dtype::f64, {64, 64}}, {dtype::f64, {64, 64}}});
  REQUIRE(c);
  REQUIRE((*c)->optimized.count("fused") == 1);
  const auto a = random_tensor({64, 64}, 1, dtype::f64), b = random_tensor({64, 64}, 2, dtype::f64);
  auto out = interpret((*c)->optimized, {a, b});
  REQUIRE(out);
  auto reference = interpret((*c)->traced, {a, b});
  REQUIRE(reference);
  check_close(out->front(), reference->front(), 1e-12, 1e-14);
  // Same answer whether or not the buffer was reused; the parameters were left untouched.
  check_close(a, random_tensor({64, 64}, 1, dtype::f64), 0, 0);
  REQUIRE(fn({a}));
  check_close(a, random_tensor({64, 64}, 1, dtype::f64), 0, 0);

  // The kernel itself: a dead input of the output's type takes the result; a shared one does not.
  auto single = fn.concrete({{dtype::f64, {64, 64}}});
  REQUIRE(single);
  const auto& g = (*single)->optimized;
  const auto fused_id = g.outputs().front();
  REQUIRE(g.at(fused_id).op == "fused");
  auto inputs_with = [&](tensor x) {
    std::vector<tensor> ins;
    for (auto in : g.at(fused_id).inputs) ins.push_back(g.at(in).op == "constant" ? g.constant_value(in) : x);
    return ins;
  };
  const auto parameter_slot = static_cast<std::size_t>(
      std::find_if(g.at(fused_id).inputs.begin(), g.at(fused_id).inputs.end(),
                   [&](node_id id) { return g.at(id).op == "parameter"; }) - g.at(fused_id).inputs.begin());
  auto dead = inputs_with(random_tensor({64, 64}, 3, dtype::f64));
  const void* dead_data = dead[parameter_slot].raw_data();
  auto in_place = codegen::run_fused_cpu(g.program(fused_id), dead, &dead[parameter_slot]);
  REQUIRE(in_place);
  CHECK(in_place->raw_data() == dead_data);
  const tensor kept = random_tensor({64, 64}, 3, dtype::f64);
  auto shared = inputs_with(kept);
  auto copied = codegen::run_fused_cpu(g.program(fused_id), shared, &shared[parameter_slot]);
  REQUIRE(copied);
  CHECK(copied->raw_data() != kept.raw_data());
  check_close(*copied, *in_place, 0, 0);
}

TEST_CASE("a fused kernel reads a bias over the trailing dims without broadcasting it first", "[graph][passes]") {
  // relu(x + b) * 2 with b over the last one or two dims (periods dividing the chunk, read as
  // tiles) and over 48 channels (not dividing it: broadcast into place first); both equal the
  // unfused graph.
  for (const af::shape& bias_dims : {af::shape{32}, af::shape{7, 32}, af::shape{1, 32}, af::shape{48}}) {
    const af::shape x_dims{3, 5, 7, bias_dims.back()};
    function fn{[](const syms& in) { return syms{relu(in[0] + in[1]) * 2.0}; }};
    auto c = fn.concrete({{dtype::f32, x_dims}, {dtype::f32, bias_dims}});
    REQUIRE(c);
    REQUIRE((*c)->optimized.count("fused") == 1);
    const auto x = random_tensor(x_dims, 3), b = random_tensor(bias_dims, 4);
    auto out = interpret((*c)->optimized, {x, b});
    auto reference = interpret((*c)->traced, {x, b});
    REQUIRE(out);
    REQUIRE(reference);
    check_close(out->front(), reference->front(), 1e-6, 1e-7, af::to_string(bias_dims));
  }
}

TEST_CASE("a copy is inserted once per value and device where the rule asks, and results are unchanged",
          "[graph][passes]") {
  const graph_t g = traced(
      [](const syms& in) {
        auto h = exp(in[0]);
        sym a = h, b = h;
        {
          device_scope on{in[0], "cpu:1"};
          a = tanh(h) + h * 2.0;  // h is read twice on cpu:1: one copy
          b = a * in[1];          // in[1] crosses too
        }
        return syms{b + h};       // back on the default device: a copy of b
      },
      {{dtype::f64, {5}}, {dtype::f64, {5}}});
  const graph_t copied = insert_copies(g, [](const std::string& from, const std::string& to) { return from != to; });
  CHECK(g.count("copy") == 0);
  CHECK(copied.count("copy") == 3);
  for (const auto& n : copied.nodes())
    if (n.op == "copy") CHECK(copied.at(n.inputs[0]).device != n.device);
  check_preserves(g, copied, {random_tensor({5}, 1, dtype::f64), random_tensor({5}, 2, dtype::f64)});
  // Between host-memory devices nothing moves.
  CHECK(insert_copies(g, [](const std::string&, const std::string&) { return false; }).count("copy") == 0);
}
