// The graph IR: op table, type inference, structural hashing, the verifier, to_dot and the
// reference interpreter.

#include <catch2/catch.hpp>

#include "graph_test_support.hpp"
#include "ops/elementwise.hpp"
#include "ops/linalg.hpp"
#include "ops/nn.hpp"
#include "ops/graph/graph.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/passes/fusion.hpp"

using namespace af;
using namespace af::graph;

TEST_CASE("op definitions group ops by what passes need to know", "[graph]") {
  CHECK(find_op("add")->category == op_category::elementwise_binary);
  CHECK(find_op("gelu")->category == op_category::elementwise_unary);
  CHECK(find_op("less")->category == op_category::comparison);
  CHECK(find_op("reduce_sum")->category == op_category::reduction);
  CHECK(find_op("reshape")->category == op_category::movement);
  CHECK(find_op("matmul")->category == op_category::contraction);
  CHECK(find_op("random_uniform")->category == op_category::random);
  CHECK(find_op("random_uniform")->stateful);
  CHECK(find_op("parameter")->category == op_category::source);
  CHECK(find_op("no_such_op") == nullptr);
  for (const op_def* op : all_ops()) CHECK(find_op(op->name) == op);
}

TEST_CASE("type inference broadcasts, reduces and contracts like the kernels", "[graph]") {
  const value_type x{dtype::f32, {8, 1, 3}}, y{dtype::f32, {4, 3}};
  CHECK(infer_output("add", {x, y}, {})->dims == shape{8, 4, 3});
  CHECK(infer_output("less", {x, y}, {})->type == dtype::boolean);
  CHECK(infer_output("reduce_sum", {x}, {{"axes", std::vector<int64_t>{-1}}})->dims == shape{8, 1});
  CHECK(infer_output("reduce_mean", {x}, {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{1}}})->dims ==
        shape{1, 1, 3});
  CHECK(infer_output("argmax", {x}, {{"axis", int64_t{2}}})->type == dtype::i64);
  CHECK(infer_output("matmul", {value_type{dtype::f32, {5, 2, 3}}, value_type{dtype::f32, {3, 7}}}, {})->dims ==
        shape{5, 2, 7});
  CHECK(infer_output("matmul", {value_type{dtype::f32, {3, 2}}, value_type{dtype::f32, {3, 7}}},
                     {{"transpose_a", int64_t{1}}})->dims == shape{2, 7});
  CHECK(infer_output("reshape", {x}, {{"shape", std::vector<int64_t>{-1, 3}}})->dims == shape{8, 3});
  CHECK(infer_output("transpose", {x}, {{"perm", std::vector<int64_t>{2, 0, 1}}})->dims == shape{3, 8, 1});
  CHECK(infer_output("conv2d", {value_type{dtype::f32, {2, 9, 9, 3}}, value_type{dtype::f32, {3, 3, 3, 4}}},
                     {{"padding", std::string{"same"}}, {"strides", std::vector<int64_t>{2, 2}}})->dims ==
        shape{2, 5, 5, 4});
  // A dimension known only at run time stays unknown, or takes the other side's size.
  const value_type batch{dtype::f32, {-1, 3}};
  CHECK(infer_output("add", {batch, value_type{dtype::f32, {3}}}, {})->dims == shape{-1, 3});
  CHECK(infer_output("matmul", {batch, value_type{dtype::f32, {3, 5}}}, {})->dims == shape{-1, 5});
}

TEST_CASE("type errors name the op and every input type", "[graph]") {
  auto bad = infer_output("matmul", {value_type{dtype::f32, {2, 3}}, value_type{dtype::f32, {4, 5}}}, {});
  REQUIRE_FALSE(bad);
  CHECK(bad.error_value().code == errc::shape_mismatch);
  CHECK_THAT(bad.error_value().message, Catch::Contains("matmul") && Catch::Contains("f32[2,3]") && Catch::Contains("f32[4,5]"));
  auto mixed = infer_output("add", {value_type{dtype::f32, {2}}, value_type{dtype::f64, {2}}}, {});
  REQUIRE_FALSE(mixed);
  CHECK(mixed.error_value().code == errc::dtype_mismatch);
  auto unknown = infer_output("fft", {value_type{dtype::f32, {2}}}, {});
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error_value().code == errc::unsupported);
  // A flag attribute is 0 or 1: a damaged graph's 237 is not a third form of GELU.
  CHECK(infer_output("gelu", {value_type{dtype::f32, {2}}}, {{"approximate", int64_t{1}}}));
  auto not_a_flag = infer_output("gelu", {value_type{dtype::f32, {2}}}, {{"approximate", int64_t{237}}});
  REQUIRE_FALSE(not_a_flag);
  CHECK_THAT(not_a_flag.error_value().message, Catch::Contains("'approximate'") && Catch::Contains("237"));
}

TEST_CASE("identical subgraphs are built once, stateful ops and parameters never merge", "[graph]") {
  graph_builder b;
  const auto x = b.parameter({dtype::f32, {4}}, "x");
  const auto y = b.parameter({dtype::f32, {4}}, "y");
  const auto sum1 = *b.add("add", {x, y});
  const auto sum2 = *b.add("add", {x, y});
  CHECK(sum1 == sum2);
  CHECK(*b.add("exp", {sum1}) == *b.add("exp", {sum2}));
  CHECK(*b.add("add", {y, x}) != sum1);  // operand order is structure
  CHECK(*b.add("reduce_sum", {x}, {{"axes", std::vector<int64_t>{0}}}) !=
        *b.add("reduce_sum", {x}, {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{1}}}));
  const op_attrs random{{"shape", std::vector<int64_t>{4}}, {"seed", int64_t{1}}};
  CHECK(*b.add("random_uniform", {}, random) != *b.add("random_uniform", {}, random));
  CHECK(b.constant(tensor::scalar(2.0f)) == b.constant(tensor::scalar(2.0f)));
  CHECK(b.constant(tensor::scalar(2.0f)) != b.constant(tensor::scalar(3.0f)));
  CHECK(b.constant(tensor::scalar(2.0f)) != b.constant(tensor::scalar(2.0)));
  auto g = std::move(b).finish({sum1});
  CHECK(g.verify().has_value());
  CHECK(g.parameters().size() == 2);
}

TEST_CASE("every node refers to its op definition and says what it is in a field", "[graph]") {
  graph_builder b;
  const auto x = b.parameter({dtype::f32, {4}}, "x");
  const auto two = b.constant(tensor::scalar(2.0f));
  const auto y = *b.add("exp", {*b.add("mul", {x, two})});
  const auto total = *b.add("reduce_sum", {y}, {{"axes", std::vector<int64_t>{0}}});
  const auto plain = std::move(b).finish({total});
  CHECK(plain.at(x).kind == node_kind::parameter);
  CHECK(plain.at(two).kind == node_kind::constant);
  CHECK(plain.at(y).kind == node_kind::op);
  for (const auto& n : plain.nodes()) CHECK(n.def == find_op(n.op));
  // Fusion makes a fused node; the kind travels through passes and copies.
  const auto fused = fuse_elementwise(plain);
  std::size_t fused_nodes = 0;
  for (const auto& n : fused.nodes()) {
    CHECK(n.def == find_op(n.op));
    CHECK((n.kind == node_kind::fused) == (n.op == "fused"));
    if (n.kind == node_kind::fused) ++fused_nodes;
  }
  CHECK(fused_nodes == 1);
  // Parameters, constants and fused groups have calls of their own.
  graph_builder other;
  const auto p = other.parameter({dtype::f32, {4}});
  CHECK_FALSE(other.add("parameter", {}));
  CHECK_FALSE(other.add("fused", {p}));
  CHECK_FALSE(other.add("constant", {}));
}

TEST_CASE("the verifier rejects a fused node whose program disagrees with it", "[graph]") {
  auto checked = graph_with_inconsistent_fused_node().verify();
  REQUIRE_FALSE(checked);
  CHECK_THAT(checked.error_value().message, Catch::Contains("node 1") && Catch::Contains("fused"));
}

TEST_CASE("to_dot draws every node and edge", "[graph]") {
  graph_builder b;
  const auto x = b.parameter({dtype::f32, {2, 3}}, "x");
  const auto r = *b.add("relu", {x});
  auto g = std::move(b).finish({r});
  const auto dot = g.to_dot("tiny");
  CHECK_THAT(dot, Catch::Contains("digraph \"tiny\"") && Catch::Contains("relu") && Catch::Contains("f32[2,3]") &&
                      Catch::Contains("n0 -> n1") && Catch::Contains("output 0"));
}

TEST_CASE("the interpreter runs a graph like the eager ops and checks its arguments", "[graph]") {
  graph_builder b;
  const auto x = b.parameter({dtype::f32, {-1, 3}}, "x");
  const auto w = b.parameter({dtype::f32, {3, 2}}, "w");
  const auto h = *b.add("matmul", {x, w});
  const auto t = *b.add("transpose", {h}, {{"perm", std::vector<int64_t>{1, 0}}});
  const auto s = *b.add("softmax", {t}, {{"axis", int64_t{-1}}});
  auto g = std::move(b).finish({s, h});
  const auto xs = random_tensor({5, 3}, 1), ws = random_tensor({3, 2}, 2);
  auto out = interpret(g, {xs, ws});
  REQUIRE(out);
  REQUIRE(out->size() == 2);
  const auto expected_h = value_of(matmul(xs, ws));
  check_close((*out)[1], expected_h, 0, 0);
  check_close((*out)[0], value_of(softmax(value_of(expected_h.transpose()), -1)), 1e-6, 1e-7);

  auto wrong = interpret(g, {random_tensor({5, 4}, 3), ws});
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.error_value().message, Catch::Contains("argument 0 'x'") && Catch::Contains("f32[-1,3]") &&
                                              Catch::Contains("[5,4]"));
  CHECK_FALSE(interpret(g, {xs}));
}
