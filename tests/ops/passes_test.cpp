// Each pass keeps results and does what its rule says on graphs made for it.

#include <catch2/catch.hpp>

#include "graph_test_support.hpp"
#include "ops/graph/function.hpp"
#include "ops/graph/interpreter.hpp"
#include "ops/passes/fusion.hpp"
#include "ops/passes/passes.hpp"

using namespace af;
using af::graph::value_type;
using graph_t = af::graph::graph;
using namespace af::graph;
using syms = std::vector<sym>;

namespace {

graph_t traced(const function::body& fn, const std::vector<value_type>& signature) {
  auto g = trace(fn, signature);
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
