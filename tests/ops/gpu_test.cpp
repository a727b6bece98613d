#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "graph_test_support.hpp"
#include "ops/codegen/cpu_fused.hpp"
#include "ops/codegen/cuda_fused.hpp"
#include "ops/gpu.hpp"
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

// One fused program per fusible op (binary ops read a full input and a broadcast one), and the
// chain gelu(x * a + b) * c that bench_fusion times.
struct fused_case {
  std::string name;
  graph::fused_program program;
  std::vector<bool> broadcast;
};

std::vector<fused_case> fused_cases(dtype type, int64_t n) {
  const graph::value_type full{type, {n}}, single{type, {1}};
  auto step = [&](std::string op, std::vector<int> args, op_attrs attrs = {}) {
    return graph::fused_step{std::move(op), std::move(args), std::move(attrs), full};
  };
  std::vector<fused_case> cases;
  for (const char* op : {"add", "sub", "mul", "div", "pow", "maximum", "minimum"})
    cases.push_back({op, {{full, single}, {step(op, {0, 1})}}, {false, true}});
  for (const char* op : {"neg", "abs", "relu", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf"})
    cases.push_back({op, {{full}, {step(op, {0})}}, {false}});
  cases.push_back({"gelu", {{full}, {step("gelu", {0})}}, {false}});
  cases.push_back({"gelu_tanh", {{full}, {step("gelu", {0}, {{"approximate", int64_t{1}}})}}, {false}});
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
