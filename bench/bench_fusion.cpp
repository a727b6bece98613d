// Elementwise fusion: y = gelu(x*a + b) * c on 16M float32 (a, b, c scalars), our eager ops (four
// passes over memory, four temporaries) against the same chain traced by af::function (one fused
// kernel, one read of x and one write of y), and memcpy on the same threads as the bandwidth bound.
//
//   build/bench/bench_fusion [--quick] [--elements N]
// Last line: one JSON object (eager_ms, compiled_ms, speedup, compiled_gbps, memcpy_gbps,
// fraction_of_bandwidth). bench/torch_fusion_reference.py times PyTorch on the same chain.

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include "actors/graph_executor.hpp"
#include "actors/runtime.hpp"
#include "bench_common.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/runtime/function.hpp"
#include "ops/parallel.hpp"
#include "ops/random.hpp"

namespace {

int64_t flag_value(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

af::tensor ok(af::expected<af::tensor> t) {
  if (!t) {
    std::fprintf(stderr, "bench_fusion: %s\n", t.error_value().to_string().c_str());
    std::exit(1);
  }
  return std::move(*t);
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv, "build/bench/bench_fusion [--quick] [--elements N]", {"--quick"}, {"--elements"});
  using namespace af;
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const int64_t n = flag_value(argc, argv, "--elements", int64_t{1} << 24);
  const int reps = quick ? 7 : 21;
  const int threads = thread_budget();

  const tensor x = ok(random_uniform({n}, 1, dtype::f32, -3.0, 3.0));
  const tensor a = tensor::scalar(1.5f), b = tensor::scalar(-0.25f), c = tensor::scalar(0.75f);

  auto eager = [&] { return ok(mul(ok(gelu(ok(add(ok(mul(x, a)), b)))), c)); };
  function compiled{[](const std::vector<sym>& in) { return std::vector<sym>{gelu(in[0] * in[1] + in[2]) * in[3]}; }};
  auto run_compiled = [&] {
    auto out = compiled({x, a, b, c});
    if (!out) {
      std::fprintf(stderr, "bench_fusion: %s\n", out.error_value().to_string().c_str());
      std::exit(1);
    }
    return out->front();
  };

  // Same numbers both ways (the fused f32 gelu uses a polynomial erf: |error| <= 1.5e-7).
  {
    const auto e = eager().to_vector<float>(), f = run_compiled().to_vector<float>();
    double worst = 0;
    for (std::size_t i = 0; i < e.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(e[i] - f[i])));
    std::printf("max |eager - compiled| = %.3g\n", worst);
    if (worst > 1e-5) {
      std::fprintf(stderr, "bench_fusion: compiled result differs from eager by %g\n", worst);
      return 1;
    }
  }

  tensor copy_out = ok(tensor::empty({n}, dtype::f32));
  auto copy = [&] {
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(copy_out.raw_data());
    parallel_for(static_cast<int64_t>(x.nbytes()), int64_t{1} << 22, [&](int64_t lo, int64_t hi) {
      std::memcpy(dst + lo, src + lo, static_cast<std::size_t>(hi - lo));
    });
  };

  // Alternate the three so that machine noise hits them alike.
  std::vector<double> eager_s, compiled_s, copy_s;
  eager();
  run_compiled();
  copy();
  for (int r = 0; r < reps; ++r) {
    eager_s.push_back(bench::seconds_of([&] { eager(); }));
    compiled_s.push_back(bench::seconds_of([&] { run_compiled(); }));
    copy_s.push_back(bench::seconds_of(copy));
  }
  const double eager_ms = 1e3 * bench::median(eager_s), compiled_ms = 1e3 * bench::median(compiled_s);
  const double bytes = 2.0 * static_cast<double>(x.nbytes());  // read x, write y
  const double compiled_gbps = bytes / (compiled_ms * 1e-3) / 1e9;
  const double memcpy_gbps = bytes / bench::median(copy_s) / 1e9;
  std::printf("gelu(x*a+b)*c on %lld f32, %d threads: eager %.2f ms, compiled %.2f ms (%.2fx); %.1f GB/s vs memcpy %.1f GB/s\n",
              static_cast<long long>(n), threads, eager_ms, compiled_ms, eager_ms / compiled_ms, compiled_gbps, memcpy_gbps);
  std::printf("traces: %lld\n", static_cast<long long>(compiled.trace_count()));

  // Per-step overhead of running a graph as an actor topology, next to its kernels: one traced
  // training step of an MLP (batch 256, 784 -> 256 -> 10, forward, backward, SGD), run by the
  // interpreter (a loop on this thread) and by the actors.
  function train_step{[](const std::vector<sym>& in) {
    const auto &input = in[0], &target = in[1], &w1 = in[2], &w2 = in[3];
    auto logits = matmul(gelu(matmul(input, w1)), w2);
    auto loss = reduce_mean((logits - target) * (logits - target));
    auto g = gradients(loss, {w1, w2});
    return std::vector<sym>{loss, w1 - g[0] * 0.01, w2 - g[1] * 0.01};
  }};
  const std::vector<tensor> step_args{ok(random_uniform({256, 784}, 2)), ok(random_uniform({256, 10}, 3)),
                                      ok(random_uniform({784, 256}, 4, dtype::f32, -0.05, 0.05)),
                                      ok(random_uniform({256, 10}, 5, dtype::f32, -0.05, 0.05))};
  auto concrete = train_step.concrete({{dtype::f32, {256, 784}}, {dtype::f32, {256, 10}}, {dtype::f32, {784, 256}},
                                       {dtype::f32, {256, 10}}});
  if (!concrete) {
    std::fprintf(stderr, "bench_fusion: %s\n", concrete.error_value().to_string().c_str());
    return 1;
  }
  const auto& step_graph = (*concrete)->optimized;
  runtime rt{{.scheduler_threads = threads}};
  auto executor = graph_executor::launch(rt, step_graph);
  if (!executor) {
    std::fprintf(stderr, "bench_fusion: %s\n", executor.error_value().to_string().c_str());
    return 1;
  }
  std::vector<double> interp_s, actor_s;
  const int step_reps = quick ? 15 : 50;
  for (int r = 0; r < step_reps + 2; ++r) {
    const double a_s = bench::seconds_of([&] { (void)graph::interpret(step_graph, step_args).value(); });
    const double b2 = bench::seconds_of([&] { (void)executor->run(step_args).value(); });
    if (r >= 2) {  // the first two warm caches and allocator
      interp_s.push_back(a_s);
      actor_s.push_back(b2);
    }
  }
  const double interp_ms = 1e3 * bench::median(interp_s), actor_ms = 1e3 * bench::median(actor_s);
  std::printf("MLP training step (%zu nodes, %zu actors): interpreter %.3f ms, actor topology %.3f ms (overhead %.1f%%)\n",
              step_graph.size(), executor->actor_count(), interp_ms, actor_ms, 100.0 * (actor_ms / interp_ms - 1.0));

  bench::json_line json;
  json.add("bench", std::string{"fusion"});
  json.add("elements", static_cast<double>(n));
  json.add("threads", static_cast<double>(threads));
  json.add("eager_ms", eager_ms);
  json.add("compiled_ms", compiled_ms);
  json.add("speedup", eager_ms / compiled_ms);
  json.add("compiled_gbps", compiled_gbps);
  json.add("memcpy_gbps", memcpy_gbps);
  json.add("fraction_of_bandwidth", compiled_gbps / memcpy_gbps);
  json.add("train_step_interpreter_ms", interp_ms);
  json.add("train_step_actors_ms", actor_ms);
  json.add("actor_step_overhead", actor_ms / interp_ms - 1.0);
  json.print();
  return 0;
}
