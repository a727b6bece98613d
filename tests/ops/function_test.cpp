// af::function: traced graphs compute what eager ops compute, signatures retrace exactly when
// they should, and trace errors name the op, the shapes and the call site.

#include <catch2/catch.hpp>

#include <cmath>

#include "graph_test_support.hpp"
#include "ops/codegen/cpu_fused.hpp"
#include "ops/codegen/cuda_fused.hpp"
#include "ops/elementwise.hpp"
#include "ops/gpu.hpp"
#include "ops/runtime/backend.hpp"
#include "ops/runtime/function.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/passes/fusion.hpp"
#include "ops/linalg.hpp"
#include "ops/nn.hpp"
#include "ops/reduce.hpp"

using namespace af;
using syms = std::vector<sym>;

namespace {

tensor eager_scalar(double v, dtype type) { return value_of(tensor::full({}, v, type)); }

// Each case: a traced body, the same computation in eager ops, and its argument shapes.
struct suite_case {
  const char* name;
  function::body traced;
  std::function<tensor(const std::vector<tensor>&)> eager;
  std::vector<shape> shapes;
};

std::vector<suite_case> suite(dtype type) {
  auto c = [type](double v) { return eager_scalar(v, type); };
  return {
      {"gelu(x*a+b)*c",
       [](const syms& in) { return syms{gelu(in[0] * in[1] + in[2]) * in[3]}; },
       [](const std::vector<tensor>& in) {
         return value_of(mul(value_of(gelu(value_of(add(value_of(mul(in[0], in[1])), in[2])))), in[3]));
       },
       {{64, 33}, {33}, {64, 33}, {1}}},
      {"tanh-gelu chain with exp and sigmoid",
       [](const syms& in) { return syms{sigmoid(gelu(in[0], true) - exp(in[0] * 0.5)) * 2.0}; },
       [c](const std::vector<tensor>& in) {
         auto g = value_of(gelu(in[0], true));
         auto e = value_of(af::exp(value_of(mul(in[0], c(0.5)))));
         return value_of(mul(value_of(sigmoid(value_of(sub(g, e)))), c(2.0)));
       },
       {{1000}}},
      {"MLP forward",
       [](const syms& in) {
         auto h = relu(matmul(in[0], in[1]) + in[2]);
         return syms{softmax(matmul(h, in[3]) + in[4])};
       },
       [](const std::vector<tensor>& in) {
         auto h = value_of(relu(value_of(add(value_of(matmul(in[0], in[1])), in[2]))));
         return value_of(softmax(value_of(add(value_of(matmul(h, in[3])), in[4])), -1));
       },
       {{16, 12}, {12, 20}, {20}, {20, 5}, {5}}},
      {"attention softmax(QK^T / sqrt(d)) V",
       [](const syms& in) {
         auto scores = matmul(in[0], in[1], false, true) / std::sqrt(8.0);
         return syms{matmul(softmax(scores), in[2])};
       },
       [c](const std::vector<tensor>& in) {
         auto scores = value_of(div(value_of(matmul(in[0], in[1], false, true)), c(std::sqrt(8.0))));
         return value_of(matmul(value_of(softmax(scores, -1)), in[2]));
       },
       {{2, 6, 8}, {2, 6, 8}, {2, 6, 8}}},
      {"layer norm",
       [](const syms& in) {
         auto mean = reduce_mean(in[0], {-1}, true);
         auto centered = in[0] - mean;
         auto var = reduce_mean(centered * centered, {-1}, true);
         return syms{centered * rsqrt(var + 1e-5) * in[1] + in[2]};
       },
       [c](const std::vector<tensor>& in) {
         auto mean = value_of(reduce_mean(in[0], {-1}, true));
         auto centered = value_of(sub(in[0], mean));
         auto var = value_of(reduce_mean(value_of(mul(centered, centered)), {-1}, true));
         auto normed = value_of(mul(centered, value_of(rsqrt(value_of(add(var, c(1e-5)))))));
         return value_of(add(value_of(mul(normed, in[1])), in[2]));
       },
       {{10, 32}, {32}, {32}}},
      {"conv block",
       [](const syms& in) {
         auto y = conv2d(in[0], in[1], {.padding = padding_mode::same});
         return syms{reduce_max(relu(y + in[2]), {1, 2})};
       },
       [](const std::vector<tensor>& in) {
         auto y = value_of(conv2d(in[0], in[1], {.padding = padding_mode::same}));
         return value_of(reduce_max(value_of(relu(value_of(add(y, in[2])))), {1, 2}));
       },
       {{2, 7, 7, 3}, {3, 3, 3, 4}, {4}}},
  };
}

}  // namespace

TEST_CASE("traced functions equal eager execution on random inputs", "[graph][function]") {
  for (dtype type : {dtype::f64, dtype::f32}) {
    // f64 runs libm in fused loops too: equal to rounding. f32 fused loops use fast exp/erf/tanh.
    const double rtol = type == dtype::f64 ? 1e-12 : 2e-5, atol = type == dtype::f64 ? 1e-13 : 2e-6;
    uint64_t seed = 10;
    for (const auto& c : suite(type)) {
      INFO(c.name << " in " << to_string(type));
      std::vector<tensor> args;
      for (const auto& s : c.shapes) args.push_back(random_tensor(s, seed++, type));
      function fn{c.traced};
      function unoptimized{c.traced, {.optimize = false}};
      auto got = fn(args);
      if (!got) FAIL(got.error_value().to_string());
      auto plain = unoptimized(args);
      REQUIRE(plain);
      const tensor expected = c.eager(args);
      check_close(got->front(), expected, rtol, atol, "fused graph vs eager");
      check_close(plain->front(), expected, rtol, atol, "traced graph vs eager");
      // Every fused group of the suite also compiles to PTX for the GPU (NVRTC needs no GPU).
      std::vector<graph::value_type> signature;
      for (const auto& a : args) signature.push_back({a.type(), a.shape()});
      const auto& optimized = fn.concrete(signature).value()->optimized;
      for (std::size_t id = 0; id < optimized.size(); ++id) {
        if (optimized.nodes()[id].op != "fused") continue;
        const auto& program = optimized.program(static_cast<graph::node_id>(id));
        auto ptx = codegen::compile_cuda(program);
        if (!gpu::built_with_cuda()) {
          CHECK(ptx.error_value().code == errc::unsupported);
          continue;
        }
        if (!ptx) FAIL(ptx.error_value().to_string());
        CHECK(ptx->find(".entry " + codegen::emit_cuda(program).value().kernel_name) != std::string::npos);
      }
    }
  }
}

TEST_CASE("a known signature reuses its trace, a new one retraces", "[graph][function]") {
  function fn{[](const syms& in) { return syms{relu(in[0]) * 2.0}; }};
  CHECK(fn.trace_count() == 0);
  REQUIRE(fn({random_tensor({4, 3}, 1)}));
  REQUIRE(fn({random_tensor({4, 3}, 2)}));
  CHECK(fn.trace_count() == 1);
  REQUIRE(fn({random_tensor({5, 3}, 3)}));  // new shape
  CHECK(fn.trace_count() == 2);
  REQUIRE(fn({random_tensor({5, 3}, 4, dtype::f64)}));  // new dtype
  CHECK(fn.trace_count() == 3);
  REQUIRE(fn({random_tensor({4, 3}, 5)}));
  CHECK(fn.trace_count() == 3);

  // With an input signature, one trace serves every batch size.
  function batched{[](const syms& in) { return syms{reduce_sum(in[0] * in[0], {-1})}; },
                   {.input_signature = std::vector<graph::value_type>{{dtype::f32, {-1, 3}}}}};
  for (int64_t rows : {1, 7, 30}) {
    auto out = batched({random_tensor({rows, 3}, static_cast<uint64_t>(rows))});
    REQUIRE(out);
    CHECK(out->front().shape() == shape{rows});
  }
  CHECK(batched.trace_count() == 1);
  auto refused = batched({random_tensor({2, 4}, 9)});
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error_value().message, Catch::Contains("input signature") && Catch::Contains("f32[-1,3]"));
  CHECK(batched.trace_count() == 1);
}

TEST_CASE("a shape mismatch while tracing names the op, the shapes and the call site", "[graph][function]") {
  function fn{[](const syms& in) { return syms{matmul(in[0], in[1])}; }};
  const int line = __LINE__ - 1;
  auto bad = fn({random_tensor({2, 3}, 1), random_tensor({4, 5}, 2)});
  REQUIRE_FALSE(bad);
  CHECK(bad.error_value().code == errc::shape_mismatch);
  CHECK_THAT(bad.error_value().message, Catch::Contains("matmul") && Catch::Contains("f32[2,3]") &&
                                            Catch::Contains("f32[4,5]") &&
                                            Catch::Contains("function_test.cpp:" + std::to_string(line)));
  // Operators cannot see their call site; they still name the op and the shapes.
  function sum{[](const syms& in) { return syms{in[0] + in[1]}; }};
  auto mismatch = sum({random_tensor({2, 3}, 1), random_tensor({4}, 2)});
  REQUIRE_FALSE(mismatch);
  CHECK_THAT(mismatch.error_value().message, Catch::Contains("add") && Catch::Contains("f32[2,3]") && Catch::Contains("f32[4]"));
}

TEST_CASE("fusion makes gelu(x*a+b)*c one kernel and keeps other ops apart", "[graph][fusion]") {
  function fn{[](const syms& in) { return syms{gelu(in[0] * in[1] + in[2]) * in[3]}; }};
  auto c = fn.concrete({{dtype::f32, {1024}}, {dtype::f32, {1024}}, {dtype::f32, {1024}}, {dtype::f32, {1024}}});
  REQUIRE(c);
  const auto& g = (*c)->optimized;
  CHECK(g.count("fused") == 1);
  CHECK(g.size() == 5);  // four parameters and the kernel
  CHECK((*c)->traced.size() == 8);
  CHECK(g.program(g.outputs().front()).steps.size() == 4);

  // A matmul cannot join; the bias add and relu after it fuse, as do the ops after the softmax.
  function mlp{[](const syms& in) {
    auto h = relu(matmul(in[0], in[1]) + in[2]);
    return syms{exp(softmax(h)) * 3.0 + 1.0};
  }};
  auto m = mlp.concrete({{dtype::f32, {4, 8}}, {dtype::f32, {8, 6}}, {dtype::f32, {6}}});
  REQUIRE(m);
  const auto& mg = (*m)->optimized;
  CHECK(mg.count("matmul") == 1);
  CHECK(mg.count("softmax") == 1);
  CHECK(mg.count("fused") == 2);
  CHECK(mg.verify().has_value());

  // A value used twice stays a kernel output: x*a feeds both branches.
  function shared{[](const syms& in) {
    auto p = in[0] * in[1];
    return syms{exp(p) + tanh(p)};
  }};
  auto s = shared.concrete({{dtype::f32, {16}}, {dtype::f32, {16}}});
  REQUIRE(s);
  CHECK((*s)->optimized.count("mul") == 1);
  CHECK((*s)->optimized.count("fused") == 1);  // exp, tanh and the add read p once
}

TEST_CASE("fused f32 kernels stay within a few ulp of libm across the range", "[graph][fusion]") {
  auto x = value_of(tensor::empty({200001}, dtype::f32));
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = -20.0f + 40.0f * static_cast<float>(i) / 200000.0f;
  // The reference is double-precision libm rounded to float (the eager float kernels use the same
  // approximations as the fused ones, so they would not check anything).
  struct probe {
    const char* name;
    function::body fn;
    double (*reference)(double);
    double rtol, atol;
  };
  const probe probes[] = {
      {"exp", [](const syms& in) { return syms{exp(in[0] * 0.5 * 2.0)}; }, [](double v) { return std::exp(v); }, 3e-7, 0},
      {"tanh", [](const syms& in) { return syms{tanh(in[0] * 0.5 * 2.0)}; }, [](double v) { return std::tanh(v); }, 5e-7, 1e-30},
      {"sigmoid", [](const syms& in) { return syms{sigmoid(in[0] * 0.5 * 2.0)}; },
       [](double v) { return 1 / (1 + std::exp(-v)); }, 1e-6, 1e-30},
      {"erf", [](const syms& in) { return syms{erf(in[0] * 0.5 * 2.0)}; }, [](double v) { return std::erf(v); }, 0, 5e-7},
      {"gelu", [](const syms& in) { return syms{gelu(in[0] * 0.5 * 2.0)}; },
       [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, 1e-6, 3e-7},
  };
  for (const auto& p : probes) {
    INFO(p.name);
    function fn{p.fn};
    auto got = fn({x});
    REQUIRE(got);
    CHECK(fn.concrete({{dtype::f32, {200001}}}).value()->optimized.count("fused") == 1);
    std::vector<float> want(static_cast<std::size_t>(x.numel()));
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(p.reference(x.data<float>()[i]));
    check_close(got->front(), tensor::from_vector<float>(want), p.rtol, p.atol);
  }
}

TEST_CASE("a fused kernel with a 20 MB output, streamed to memory, equals the ops run one by one", "[graph][fusion]") {
  // Past 16 MB the output bypasses the cache and inputs are prefetched; 37 extra elements leave a
  // partial last chunk that takes the plain path.
  const int64_t n = (int64_t{5} << 20) + 37;
  auto x = value_of(af::random_uniform({n}, 11, dtype::f32, -4.0, 4.0));
  const auto a = tensor::scalar(1.5f), b = tensor::scalar(-0.25f), c = tensor::scalar(0.75f);
  function fn{[](const syms& in) { return syms{gelu(in[0] * in[1] + in[2]) * in[3]}; }};
  auto got = fn({x, a, b, c});
  REQUIRE(got);
  CHECK(fn.concrete({{dtype::f32, {n}}, {dtype::f32, {}}, {dtype::f32, {}}, {dtype::f32, {}}}).value()->optimized.count("fused") == 1);
  const auto expected = value_of(af::mul(value_of(af::gelu(value_of(af::add(value_of(af::mul(x, a)), b)))), c));
  check_close(got->front(), expected, 1e-6, 3e-7);
}

TEST_CASE("scalar multiplies and adds folded into fused loops give the unfused results", "[graph][fusion]") {
  // Each chain runs fused (scalar ops folded where they can be) and as separate ops; a, b, c are
  // scalars, so the folding applies. Differences stay within an fma's rounding.
  const std::vector<std::pair<const char*, function::body>> chains = {
      {"exp(x*a + b)*c - b", [](const syms& in) { return syms{exp(in[0] * in[1] + in[2]) * in[3] - in[2]}; }},
      {"tanh(a - x)", [](const syms& in) { return syms{tanh(in[1] - in[0])}; }},
      {"(x - a)*b", [](const syms& in) { return syms{(in[0] - in[1]) * in[2]}; }},
      {"x*a used twice", [](const syms& in) {
         auto p = in[0] * in[1];
         return syms{exp(p) + tanh(p)};
       }},
      {"relu(x)*a*b + c", [](const syms& in) { return syms{relu(in[0]) * in[1] * in[2] + in[3]}; }},
      {"sigmoid(b + x*a) - c*x", [](const syms& in) { return syms{sigmoid(in[2] + in[0] * in[1]) - in[3] * in[0]}; }},
      {"a - gelu(x)", [](const syms& in) { return syms{in[1] - gelu(in[0])}; }},
  };
  for (dtype type : {dtype::f32, dtype::f64}) {
    auto x = value_of(af::random_uniform({4099}, 21, type, -3.0, 3.0));
    const auto scalar = [&](double v) { return value_of(tensor::full({}, v, type)); };
    const std::vector<tensor> args{x, scalar(1.5), scalar(-0.25), scalar(0.75)};
    for (const auto& [name, body] : chains) {
      INFO(name << " " << to_string(type));
      function fused{body};
      function plain{body, {.optimize = false}};
      auto got = fused(args);
      auto want = plain(args);
      REQUIRE(got);
      REQUIRE(want);
      CHECK(fused.concrete({{type, {4099}}, {type, {}}, {type, {}}, {type, {}}}).value()->optimized.count("fused") >= 1);
      check_close(got->front(), want->front(), type == dtype::f32 ? 1e-6 : 1e-14, type == dtype::f32 ? 1e-6 : 1e-14);
    }
  }
  // How many loops the folding leaves: one per unary step, plus a copy for scalar ops nothing absorbs.
  const std::vector<std::pair<function::body, std::size_t>> loops = {
      {[](const syms& in) { return syms{gelu(in[0] * in[1] + in[2]) * in[3]}; }, 1},
      {chains[0].second, 1},  // exp with x*a + b before it and *c - b after it
      {chains[2].second, 2},  // (x - a)*b: no unary step to fold into
      {chains[4].second, 2},  // relu(x)*a, then *b + c
  };
  for (const auto& [body, expected_loops] : loops) {
    function fn{body};
    const auto& g = fn.concrete({{dtype::f32, {64}}, {dtype::f32, {}}, {dtype::f32, {}}, {dtype::f32, {}}}).value()->optimized;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (g.at(static_cast<graph::node_id>(i)).op != "fused") continue;
      const auto& program = *g.shared_program(static_cast<graph::node_id>(i));
      std::vector<bool> single;
      for (const auto& in : program.inputs) single.push_back(in.dims.empty());
      CHECK(codegen::cpu_loop_count(program, single).value() == expected_loops);
    }
  }
}

TEST_CASE("every fusible op has a CUDA form, and equal programs compile once", "[graph][fusion][gpu]") {
  for (dtype type : {dtype::f32, dtype::f64}) {
    function fn{[](const syms& in) {
      auto x = in[0], y = in[1];
      auto a = maximum(abs(x) + 1.0, y) - minimum(x, y) / 3.0;
      auto b = pow(sqrt(a), y * 0.0 + 2.0) + log(a) - rsqrt(a);
      auto c = relu(-b) + sigmoid(b) * tanh(b) + exp(b * 0.01);
      return syms{gelu(c) + gelu(c, true)};
    }};
    auto concrete = fn.concrete({{type, {64}}, {type, {64}}});
    REQUIRE(concrete);
    const auto& g = (*concrete)->optimized;
    // Values used twice end groups, so this makes several kernels; together they hold every op.
    REQUIRE(g.count("fused") >= 2);
    std::string all_sources;
    std::vector<const graph::fused_program*> programs;
    for (std::size_t id = 0; id < g.size(); ++id)
      if (g.nodes()[id].op == "fused") {
        programs.push_back(&g.program(static_cast<graph::node_id>(id)));
        auto src = codegen::emit_cuda(*programs.back());
        REQUIRE(src);
        all_sources += src->source;
      }
    for (const char* fn_name : {"erf", "tanh", "rsqrt", "sqrt", "log", "pow", "fabs"})
      CHECK_THAT(all_sources, Catch::Contains(fn_name));
    CHECK_THAT(all_sources, Catch::Contains(type == dtype::f32 ? "expf(" : "exp("));
    // The fused CPU kernels agree with the unfused graph on the same inputs.
    const auto x = random_tensor({64}, 1, type, 0.5, 2.0), y = random_tensor({64}, 2, type, 0.5, 2.0);
    auto fused_out = fn({x, y});
    REQUIRE(fused_out);
    auto unfused = graph::interpret((*concrete)->traced, {x, y});
    REQUIRE(unfused);
    check_close(fused_out->front(), unfused->front(), type == dtype::f32 ? 1e-5 : 1e-12, 1e-6);
    const auto& program = *programs.front();
    if (!gpu::built_with_cuda()) continue;
    const auto before = codegen::cuda_cache_counters();
    auto first = codegen::compile_cuda(program);
    if (!first) FAIL(first.error_value().to_string());
    auto second = codegen::compile_cuda(program);
    REQUIRE(second);
    CHECK(*first == *second);
    const auto after = codegen::cuda_cache_counters();
    CHECK(after.hits >= before.hits + 1);
    CHECK(after.compiles <= before.compiles + 1);
    CHECK(first->find(".target sm_90") != std::string::npos);
  }
}

TEST_CASE("a callable that throws while traced gives an error, not a crash", "[graph][function]") {
  function odd{[](const syms&) -> syms { throw 42; }};
  auto r = odd({random_tensor({2}, 1)});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error_value().message, Catch::Contains("non-standard exception"));
  function plain{[](const syms&) -> syms { throw std::runtime_error("no such layer"); }};
  auto p = plain({random_tensor({2}, 1)});
  REQUIRE_FALSE(p);
  CHECK_THAT(p.error_value().message, Catch::Contains("no such layer"));
}

TEST_CASE("device_scope places traced ops and their gradients, passes keep devices apart", "[graph]") {
  function fn{[](const syms& in) {
    auto here = exp(in[0]) * 2.0;
    sym there = here;
    {
      device_scope on{in[0], "cpu:1"};
      there = tanh(exp(in[0]) * 2.0);  // the same ops as `here`, on another device
    }
    auto loss = reduce_sum(here + there);
    return syms{loss, gradients(loss, {in[0]})[0]};
  }};
  auto concrete = fn.concrete({{dtype::f32, {16}}});
  REQUIRE(concrete);
  const auto& traced = (*concrete)->traced;
  std::size_t exps_on[2] = {0, 0}, tanh_grads_on_1 = 0;
  for (const auto& n : traced.nodes()) {
    if (n.op == "exp") ++exps_on[n.device == "cpu:1" ? 1 : 0];
    CHECK((n.device.empty() || n.device == "cpu:1"));
  }
  CHECK(exps_on[0] == 1);  // equal ops on different devices are not merged
  CHECK(exps_on[1] == 1);
  // tanh's gradient (1 - tanh^2) * g is built on cpu:1, where tanh runs.
  for (const auto& n : traced.nodes())
    if (n.op == "mul" && n.device == "cpu:1") ++tanh_grads_on_1;
  CHECK(tanh_grads_on_1 >= 2);  // the forward x*2 and at least one gradient product
  // Fusion groups never span devices: exp*2 fuses on each device separately, with tanh on cpu:1.
  std::size_t fused_on[2] = {0, 0};
  for (const auto& n : (*concrete)->optimized.nodes())
    if (n.op == "fused") ++fused_on[n.device == "cpu:1" ? 1 : 0];
  CHECK(fused_on[0] >= 1);
  CHECK(fused_on[1] >= 1);
  auto x = value_of(af::random_uniform({16}, 5, dtype::f32, -1.0, 1.0));
  auto got = fn({x});
  REQUIRE(got);
  auto want = graph::interpret(traced, {x});
  REQUIRE(want);
  check_close(got->front(), want->front(), 1e-5, 1e-5);
}

TEST_CASE("placing an op on a device that cannot run it fails the trace naming the op and the device", "[graph]") {
  function unknown_kind{[](const syms& in) {
    device_scope on{in[0], "tpu:0"};
    return syms{exp(in[0])};
  }};
  auto refused = unknown_kind.concrete({{dtype::f32, {4}}});
  REQUIRE_FALSE(refused);
  CHECK(refused.error_value().code == errc::unsupported);
  CHECK_THAT(refused.error_value().message, Catch::Contains("'tpu:0'") && Catch::Contains("cpu"));

  // A kind whose backend runs only additions: exp fails where it is traced.
  register_device_kind("adder", [](const graph::op_def& op) {
    return op.name == "add" || op.category == graph::op_category::source;
  });
  function partly{[](const syms& in) {
    device_scope on{in[0], "adder:0"};
    auto sum = in[0] + in[0];
    return syms{exp(sum)};
  }};
  auto failed = partly.concrete({{dtype::f32, {4}}});
  REQUIRE_FALSE(failed);
  CHECK_THAT(failed.error_value().message,
             Catch::Contains("'exp'") && Catch::Contains("adder:0") && Catch::Contains("function_test.cpp"));
}
