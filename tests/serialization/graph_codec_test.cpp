// Graphs and modules as bytes (serialization/graph_codec.hpp): every op's example graph round-trips
// to equal bytes and equal values, fused programs and names included; damaged or foreign bytes are
// refused with an error naming the function, node and field, and never crash.

#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "../support/op_examples.hpp"
#include "ops/runtime/function.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/passes/fusion.hpp"
#include "serialization/graph_codec.hpp"

using namespace af;
using namespace af::testing;

namespace {

graph::graph example_graph(const op_example& ex, const std::vector<tensor>& inputs) {
  graph::graph_builder b;
  std::vector<graph::node_id> params;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    params.push_back(b.parameter({inputs[i].type(), inputs[i].shape()}, "in_" + std::to_string(i)));
  b.place_on("cpu:0");
  auto y = b.add(ex.op, params, ex.attrs, "the_op");
  if (!y) FAIL(y.error_value().to_string());
  return std::move(b).finish({*y}, {"result"});
}

graph::graph round_trip(const graph::graph& g) {
  const std::string bytes = encode_graph(g);
  auto decoded = decode_graph(bytes.data(), bytes.size(), "example.afg");
  if (!decoded) FAIL(decoded.error_value().to_string());
  CHECK(encode_graph(*decoded) == bytes);
  return *decoded;
}

void check_same_values(const graph::graph& a, const graph::graph& b, const std::vector<tensor>& inputs) {
  auto x = graph::interpret(a, inputs), y = graph::interpret(b, inputs);
  if (!x) FAIL(x.error_value().to_string());
  if (!y) FAIL(y.error_value().to_string());
  REQUIRE(x->size() == y->size());
  for (std::size_t i = 0; i < x->size(); ++i) check_close((*y)[i], (*x)[i], 0, 0);
}

// A small graph with a constant, a fused group and named inputs and outputs: the damage tests' subject.
graph::graph small_graph() {
  graph::graph_builder b;
  const auto x = b.parameter({dtype::f32, {-1, 7777}}, "features");
  const auto c = b.constant(tensor::from_vector(std::vector<float>{0.5f}, {1}));
  const auto sum = b.add("add", {x, c}).value();
  const auto out = b.add("tanh", {b.add("relu", {sum}).value()}).value();
  return graph::fuse_elementwise(std::move(b).finish({out, sum}, {"activation", "pre_activation"}));
}

}  // namespace

TEST_CASE("every op's example graph round-trips to the same bytes and values", "[serialization][graph]") {
  uint64_t seed = 900;
  for (const auto& ex : examples()) {
    INFO("op '" << ex.op << "'");
    const auto inputs = make_inputs(ex, dtype::f64, seed += 8);
    const graph::graph g = example_graph(ex, inputs);
    const graph::graph back = round_trip(g);
    CHECK(back.at(back.outputs().front()).device == "cpu:0");
    CHECK(back.at(back.outputs().front()).label == "the_op");
    CHECK(back.output_names() == std::vector<std::string>{"result"});
    check_same_values(g, back, inputs);
  }
}

TEST_CASE("fused programs and constants round-trip", "[serialization][graph]") {
  const graph::graph g = small_graph();
  REQUIRE(g.count("fused") == 1);
  const graph::graph back = round_trip(g);
  CHECK(back.count("fused") == 1);
  CHECK(back.program(back.outputs().front()).to_string() == g.program(g.outputs().front()).to_string());
  check_same_values(g, back, {random_tensor({3, 7777}, 5)});
}

TEST_CASE("a module keeps its functions, their names and its signatures", "[serialization][graph]") {
  function_options options;
  options.input_signature = std::vector<graph::value_type>{{dtype::f32, {-1, 4}}, {dtype::f32, {4, 2}}};
  options.input_names = {"x", "kernel"};
  options.output_names = {"logits", "probabilities"};
  af::function model{[](const std::vector<sym>& in) {
                       auto logits = matmul(in[0], in[1]);
                       return std::vector<sym>{logits, softmax(logits)};
                     },
                     options};
  auto concrete = model.concrete({{dtype::f32, {3, 4}}, {dtype::f32, {4, 2}}});
  REQUIRE(concrete);
  graph::module m;
  m.functions.push_back({"predict", (*concrete)->optimized});
  m.signatures.push_back(graph::signature_of("serving_default", "predict", (*concrete)->optimized));
  REQUIRE(m.verify());
  const std::string bytes = encode_module(m);
  auto back = decode_module(bytes.data(), bytes.size());
  if (!back) FAIL(back.error_value().to_string());
  const graph::signature* s = back->find_signature("serving_default");
  REQUIRE(s);
  CHECK(*s == m.signatures.front());
  CHECK(s->inputs.front().name == "x");
  CHECK(s->inputs.front().type.dims == shape{-1, 4});
  CHECK(s->outputs.back().name == "probabilities");
  REQUIRE(back->find_function("predict"));
  CHECK(encode_module(*back) == bytes);

  SECTION("a signature keeps its method name; one that does not fit its outputs is refused") {
    graph::module classify = m;
    classify.signatures.front().method_name = std::string{graph::classify_method};
    // "logits" and "probabilities" are not a classification's "scores" and "classes".
    auto refused = classify.verify();
    REQUIRE_FALSE(refused);
    CHECK_THAT(refused.error_value().message, Catch::Contains("'scores', 'classes' or both"));
    classify.signatures.front().method_name = "tensorflow/serving/frobnicate";
    CHECK_THAT(classify.verify().error_value().message, Catch::Contains("frobnicate"));
    classify.signatures.front().method_name = std::string{graph::regress_method};
    CHECK_THAT(classify.verify().error_value().message, Catch::Contains("one output, named 'outputs'"));

    graph::module predict = m;
    predict.signatures.front().method_name = std::string{graph::predict_method};
    const std::string predict_bytes = encode_module(predict);
    auto kept = decode_module(predict_bytes.data(), predict_bytes.size());
    REQUIRE(kept);
    CHECK(kept->find_signature("serving_default")->method_name == graph::predict_method);
  }

  SECTION("a signature that does not match its function is refused") {
    graph::module wrong = m;
    wrong.signatures.front().inputs.front().name = "images";
    auto refused = decode_module(encode_module(wrong).data(), encode_module(wrong).size(), "model/graph.afg");
    REQUIRE_FALSE(refused);
    CHECK_THAT(refused.error_value().message, Catch::Contains("model/graph.afg") && Catch::Contains("serving_default") &&
                                                  Catch::Contains("'images'") && Catch::Contains("'x'"));
  }
}

TEST_CASE("graphs from elsewhere are refused naming what is wrong", "[serialization][graph]") {
  std::string bytes = encode_graph(small_graph());
  auto refused = [&](const std::string& b) {
    auto r = decode_graph(b.data(), b.size(), "g.afg");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error_value().message, Catch::StartsWith("g.afg: "));
    return r.error_value();
  };

  SECTION("not a whole number of words") { CHECK(refused(bytes.substr(0, 13)).code == errc::malformed_input); }
  SECTION("an op this build does not know") {
    std::string b = bytes;
    const auto at = b.find("relu");
    REQUIRE(at != std::string::npos);
    b.replace(at, 4, "relx");
    const auto e = refused(b);
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message, Catch::Contains("unknown op 'relx'"));
  }
  SECTION("a newer op set") {
    std::string b = bytes;
    // The root struct's data section follows the segment table (8 bytes) and root pointer (8).
    uint32_t version = graph::op_set_version + 1;
    std::memcpy(b.data() + 16, &version, sizeof version);
    const auto e = refused(b);
    CHECK(e.code == errc::unsupported);
    CHECK_THAT(e.message, Catch::Contains("op set " + std::to_string(version)));
  }
  SECTION("a recorded type its inputs do not give") {
    std::string b = bytes;
    const int64_t dim = 7777, other = 7778;
    std::string needle(sizeof dim, '\0');
    std::memcpy(needle.data(), &dim, sizeof dim);
    // Dims are written in node order: the parameter's first, then the add's.
    std::size_t at = b.find(needle);
    if (at != std::string::npos) at = b.find(needle, at + 1);
    REQUIRE(at != std::string::npos);
    std::memcpy(b.data() + at, &other, sizeof other);
    const auto e = refused(b);
    CHECK_THAT(e.message, Catch::Contains("node") && Catch::Contains("7778"));
  }
}

TEST_CASE("no damaged graph crashes the decoder", "[serialization][graph]") {
  const std::string bytes = encode_graph(small_graph());
  int accepted = 0, refused = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80, 0xFF}) {
      std::string b = bytes;
      b[i] = static_cast<char>(static_cast<unsigned char>(b[i]) ^ flip);
      auto r = decode_graph(b.data(), b.size());
      if (r) {
        ++accepted;
        CHECK(r->verify());
      } else {
        ++refused;
        CHECK_FALSE(r.error_value().message.empty());
      }
    }
  }
  for (std::size_t n = 8; n < bytes.size(); n += 8) {
    auto r = decode_graph(bytes.data(), n);
    if (r) CHECK(r->verify());
  }
  CHECK(refused > 0);
  CHECK(accepted > 0);  // flips inside constant data and labels leave a valid graph
}
