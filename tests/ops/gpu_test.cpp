#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "graph_test_support.hpp"
#include "ops/codegen/cpu_fused.hpp"
#include "ops/codegen/cuda_fused.hpp"
#include "ops/gpu.hpp"
#include "ops/graph/op_def.hpp"
#include "../support/skip.hpp"

using namespace af;

namespace {

constexpr const char* hand_written_kernel = R"(
extern "C" __global__ void fused_mul_add_relu(const float* x, const float* a, const float* b,
                                              float* out, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = fmaxf(x[i] * a[i] + b[i], 0.0f);
}
)";

// One fused program per op the fusion pass may fuse, read from the op definitions (a new fusible op
// is covered without touching this file): unary ops on a full input, binary ones on a full and a
// broadcast one, each with its default attributes, and each other value of an integer flag
// attribute (gelu's `approximate`); then the chain gelu(x * a + b) * c that bench_fusion times.
struct fused_case {
  std::string name;
  graph::fused_program program;
  std::vector<bool> broadcast;
};

// An op whose fused form the cases cannot build: an arity or attribute this generator does not know.
struct uncovered_op {
  std::string name, why;
};

std::vector<fused_case> fused_cases(dtype type, int64_t n, std::vector<uncovered_op>* uncovered = nullptr) {
  const graph::value_type full{type, {n}}, single{type, {1}};
  auto step = [&](std::string op, std::vector<int> args, op_attrs attrs = {}) {
    return graph::fused_step{std::move(op), std::move(args), std::move(attrs), full};
  };
  auto miss = [&](const graph::op_def& def, std::string why) {
    if (uncovered) uncovered->push_back({def.name, std::move(why)});
  };
  std::vector<fused_case> cases;
  for (const graph::op_def* def : graph::all_ops()) {
    if (!def->fusion) continue;
    if (def->arity != 1 && def->arity != 2) {
      miss(*def, "arity " + std::to_string(def->arity));
      continue;
    }
    std::vector<op_attrs> variants{{}};
    for (const auto& attr : def->attrs) {
      if (!attr.fallback) {
        miss(*def, "attribute '" + attr.name + "' has no default");
        variants.clear();
        break;
      }
      if (const auto* flag = std::get_if<int64_t>(&*attr.fallback); flag && attr.kind == graph::attr_kind::integer)
        variants.push_back({{attr.name, int64_t{*flag == 0 ? 1 : 0}}});
    }
    for (const auto& attrs : variants) {
      if (!graph::fusible(*def, attrs, type)) {
        if (attrs.entries().empty()) miss(*def, "not fusible on " + std::string{to_string(type)} + " with its defaults");
        continue;
      }
      std::string name = def->name;
      for (const auto& [key, value] : attrs.entries()) name += " " + key + "=" + std::to_string(std::get<int64_t>(value));
      if (def->arity == 1)
        cases.push_back({name, {{full}, {step(def->name, {0}, attrs)}}, {false}});
      else
        cases.push_back({name, {{full, single}, {step(def->name, {0, 1}, attrs)}}, {false, true}});
    }
  }
  cases.push_back({"gelu(x*a+b)*c",
                   {{full, single, single, single},
                    {step("mul", {0, 1}), step("add", {4, 2}), step("gelu", {5}), step("mul", {6, 3})}},
                   {false, true, true, true}});
  return cases;
}

}  // namespace

TEST_CASE("describe names each CUDA device, or why there is none", "[cpu][gpu]") {
  const std::string line = gpu::describe();
  if (gpu::device_count() == 0) {
    CHECK(line.rfind("no GPU: ", 0) == 0);
    CHECK(line.size() > std::string("no GPU: ").size());  // and the reason
  } else {
    CHECK(line.rfind("cuda:0 ", 0) == 0);
    CHECK(line.find("(cc ") != std::string::npos);
  }
}

TEST_CASE("NVRTC compiles a generated elementwise kernel to PTX without needing a GPU", "[cpu][gpu]") {
  auto ptx = gpu::compile_to_ptx(hand_written_kernel, "fused_mul_add_relu.cu");
  if (!gpu::built_with_cuda()) {
    REQUIRE_FALSE(ptx);
    CHECK(ptx.error_value().code == errc::unsupported);
    return;
  }
  REQUIRE(ptx);
  CHECK(ptx->find(".entry fused_mul_add_relu") != std::string::npos);
  CHECK(ptx->find(".target sm_90") != std::string::npos);
}

TEST_CASE("an NVRTC compile error comes back with the compiler's log", "[cpu][gpu]") {
  auto ptx = gpu::compile_to_ptx("extern \"C\" __global__ void k() { undefined_name(); }", "broken.cu");
  REQUIRE_FALSE(ptx);
  if (!gpu::built_with_cuda()) {
    CHECK(ptx.error_value().code == errc::unsupported);
    return;
  }
  CHECK(ptx.error_value().code == errc::invalid_argument);
  CHECK(ptx.error_value().message.find("undefined_name") != std::string::npos);
  CHECK(ptx.error_value().message.find("broken.cu") != std::string::npos);
}

TEST_CASE("without a GPU, running a kernel is refused as unsupported, naming the kernel", "[cpu][gpu]") {
  if (gpu::device_count() > 0) AF_SKIP("a GPU is present: " << gpu::describe());
  float x = 1, out = 0;
  auto run = gpu::run_fused_kernel("", "fused_test", {{&x, false}}, &out, sizeof(float), 1);
  REQUIRE_FALSE(run);
  CHECK(run.error_value().code == errc::unsupported);
  CHECK(run.error_value().message.find("fused_test") != std::string::npos);
}

TEST_CASE("the GPU cases cover every fusible op of the definitions, and NVRTC compiles each", "[cpu][gpu]") {
  std::vector<uncovered_op> uncovered;
  std::set<std::string> covered;
  for (auto& c : fused_cases(dtype::f32, 64, &uncovered)) {
    covered.insert(c.name.substr(0, c.name.find(' ')));
    if (!gpu::built_with_cuda()) continue;
    INFO(c.name);
    auto ptx = codegen::compile_cuda(c.program);
    if (!ptx) FAIL(ptx.error_value().to_string());
  }
  for (const auto& u : uncovered) FAIL_CHECK("fusible op '" << u.name << "' has no GPU case: " << u.why);
  std::size_t fusible_ops = 0;
  for (const graph::op_def* def : graph::all_ops()) fusible_ops += def->fusion ? 1 : 0;
  CHECK(fusible_ops >= 19);  // the 19 of today: a broken registry must not pass with an empty list
  for (const graph::op_def* def : graph::all_ops())
    if (def->fusion) CHECK(covered.count(def->name) == 1);
  CHECK(covered.count("softplus") == 1);
}

TEST_CASE("every fusible op's generated CUDA kernel runs on the GPU and matches the CPU loop", "[gpu]") {
  if (gpu::device_count() == 0) AF_SKIP(gpu::describe());
  // An odd count, so the grid-stride loop has a ragged end.
  const int64_t n = 100003;
  for (dtype type : {dtype::f32, dtype::f64}) {
    // NVRTC compiles with --use_fast_math: f32 transcendental functions differ in the last bits.
    const double rtol = type == dtype::f32 ? 2e-5 : 1e-12, atol = type == dtype::f32 ? 2e-6 : 1e-13;
    uint64_t seed = 7;
    for (auto& c : fused_cases(type, n)) {
      INFO(c.name << " in " << to_string(type));
      std::vector<tensor> inputs;
      std::vector<gpu::kernel_input> device_inputs;
      for (bool single : c.broadcast) {
        // Positive inputs keep log, sqrt, rsqrt and pow real.
        inputs.push_back(random_tensor({single ? int64_t{1} : n}, seed++, type, 0.25, 3.0));
        device_inputs.push_back({inputs.back().raw_data(), single});
      }
      const tensor cpu = value_of(codegen::run_fused_cpu(c.program, inputs));
      auto source = codegen::emit_cuda(c.program);
      REQUIRE(source);
      auto ptx = codegen::compile_cuda(c.program);
      if (!ptx) FAIL(ptx.error_value().to_string());
      tensor device = value_of(tensor::zeros({n}, type));
      auto ran = gpu::run_fused_kernel(*ptx, source->kernel_name, device_inputs, device.raw_data(), size_of(type),
                                       static_cast<std::size_t>(n));
      if (!ran) FAIL(ran.error_value().to_string());
      check_close(device, cpu, rtol, atol, "GPU kernel vs CPU loop");
    }
  }
}

TEST_CASE("a kernel name the PTX lacks is an error naming the kernel and the CUDA call", "[gpu]") {
  if (gpu::device_count() == 0) AF_SKIP(gpu::describe());
  auto ptx = gpu::compile_to_ptx(hand_written_kernel, "fused_mul_add_relu.cu");
  REQUIRE(ptx);
  float x = 1, out = 0;
  auto run = gpu::run_fused_kernel(*ptx, "no_such_kernel", {{&x, false}}, &out, sizeof(float), 1);
  REQUIRE_FALSE(run);
  CHECK(run.error_value().message.find("no_such_kernel") != std::string::npos);
  CHECK(run.error_value().message.find("cudaLibraryGetKernel") != std::string::npos);
}
