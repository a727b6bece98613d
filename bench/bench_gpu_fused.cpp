// A generated fused kernel on the GPU against the GPU's own copy bandwidth and against the same
// program as a CPU loop, in one run.
//
// The program is gelu(x * a + b) * c over n f32 elements (a, b, c broadcast), the chain that
// bench_fusion times on the CPU. The kernel is emitted by codegen::emit_cuda, compiled by NVRTC and
// run through gpu::run_fused_kernel; its result is checked against run_fused_cpu before anything is
// timed. Figures: the kernel's time per launch, a device-to-device cudaMemcpy of the same bytes
// (the bandwidth bound a memory-bound kernel can reach: kernel_vs_copy near 1 is the goal), and
// the CPU loop on all of this machine's cores.
//
// Without a GPU it prints why and the JSON line says "skipped". Linked against actorflow::ops
// only, so that scripts/gpu_check can carry it to a GPU machine with few libraries.

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "ops/codegen/cpu_fused.hpp"
#include "ops/codegen/cuda_fused.hpp"
#include "ops/gpu.hpp"
#include "ops/random.hpp"

using namespace af;

namespace {

graph::fused_program gelu_chain(int64_t n) {
  const graph::value_type full{dtype::f32, {n}}, single{dtype::f32, {1}};
  auto step = [&](const char* op, std::vector<int> args) { return graph::fused_step{op, std::move(args), {}, full}; };
  return {{full, single, single, single},
          {step("mul", {0, 1}), step("add", {4, 2}), step("gelu", {5}), step("mul", {6, 3})}};
}

int fail(const std::string& what) {
  std::fprintf(stderr, "bench_gpu_fused: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv, "build/bench/bench_gpu_fused [--quick]", {"--quick"});
  const bool quick = bench::has_flag(argc, argv, "--quick");
  bench::json_line json;
  json.add("bench", std::string("gpu_fused"));
  json.add("device", gpu::describe());
  if (gpu::device_count() == 0) {
    std::printf("no GPU here (%s): nothing to time\n", gpu::describe().c_str());
    json.add("skipped", true);
    json.print();
    return 0;
  }
  const int64_t n = quick ? (int64_t{1} << 24) : (int64_t{1} << 26);
  const int launches = quick ? 20 : 50;
  const auto program = gelu_chain(n);
  std::vector<tensor> inputs{random_uniform({n}, 1, dtype::f32, -3.0, 3.0).value(),
                             tensor::full({1}, 1.25, dtype::f32).value(), tensor::full({1}, -0.5, dtype::f32).value(),
                             tensor::full({1}, 2.0, dtype::f32).value()};
  std::vector<gpu::kernel_input> device_inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) device_inputs.push_back({inputs[i].raw_data(), i > 0});

  auto source = codegen::emit_cuda(program);
  if (!source) return fail(source.error_value().to_string());
  auto ptx = codegen::compile_cuda(program);
  if (!ptx) return fail(ptx.error_value().to_string());
  auto device_out = tensor::zeros({n}, dtype::f32).value();
  auto timing = gpu::run_fused_kernel(*ptx, source->kernel_name, device_inputs, device_out.raw_data(), sizeof(float),
                                      static_cast<std::size_t>(n), launches);
  if (!timing) return fail(timing.error_value().to_string());

  tensor cpu_out;
  const double cpu_s = bench::median_seconds(quick ? 5 : 10, [&] { cpu_out = codegen::run_fused_cpu(program, inputs).value(); });
  // The tolerance of tests/ops/gpu_test.cpp: NVRTC's --use_fast_math differs in the last bits.
  double worst = 0, worst_abs = 0;
  const float* g = device_out.data<float>();
  const float* c = cpu_out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double diff = std::fabs(double{g[i]} - c[i]);
    worst_abs = std::max(worst_abs, diff);
    worst = std::max(worst, diff / (2e-6 + 2e-5 * std::fabs(double{c[i]})));
  }

  const double gbps = static_cast<double>(timing->bytes_moved) / (timing->kernel_ms * 1e-3) / 1e9;
  std::printf("gelu(x*a+b)*c, %lld f32: GPU kernel %.3f ms (%.0f GB/s), device copy of the same bytes %.3f ms, "
              "CPU loop %.2f ms; largest difference GPU vs CPU %.2g (%.2f of the tolerance)\n",
              static_cast<long long>(n), timing->kernel_ms, gbps, timing->copy_ms, cpu_s * 1e3, worst_abs, worst);
  json.add("elements", static_cast<double>(n));
  json.add("gpu_kernel_ms", timing->kernel_ms);
  json.add("gpu_copy_ms", timing->copy_ms);
  json.add("kernel_vs_copy", timing->copy_ms / timing->kernel_ms);
  json.add("gpu_GBps", gbps);
  json.add("cpu_loop_ms", cpu_s * 1e3);
  json.add("gpu_vs_cpu_speedup", cpu_s * 1e3 / timing->kernel_ms);
  json.add("max_abs_diff_vs_cpu", worst_abs);
  json.add("agrees_with_cpu", worst <= 1.0);
  json.print();
  return worst <= 1.0 ? 0 : 1;
}
