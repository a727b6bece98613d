// A training step compiled with af::function: forward, reverse-mode gradients and an SGD update
// traced once into one graph, optimised (elementwise chains fused) and run as actors.
//
//   build/examples/compiled_training_step

#include <cstdio>

#include "actors/graph_executor.hpp"
#include "actors/runtime.hpp"
#include "ops/runtime/function.hpp"
#include "ops/random.hpp"

int main() {
  using af::sym;
  // y = 3 x0 - 2 x1 + 1, learnt by a small MLP.
  auto inputs = af::random_uniform({512, 2}, /*seed=*/1, af::dtype::f32, -1, 1).value();
  auto target = af::tensor::empty({512, 1}, af::dtype::f32).value();
  for (int i = 0; i < 512; ++i)
    target.data<float>()[i] = 3 * inputs.data<float>()[2 * i] - 2 * inputs.data<float>()[2 * i + 1] + 1;

  af::function step{[](const std::vector<sym>& in) {
    const auto &x = in[0], &y = in[1], &w1 = in[2], &b1 = in[3], &w2 = in[4];
    auto prediction = af::matmul(af::gelu(af::matmul(x, w1) + b1), w2);
    auto loss = af::reduce_mean((prediction - y) * (prediction - y));
    auto g = af::gradients(loss, {w1, b1, w2});
    return std::vector<sym>{loss, w1 - g[0] * 0.1, b1 - g[1] * 0.1, w2 - g[2] * 0.1};
  }};
  std::vector<af::tensor> params{af::random_uniform({2, 32}, 2, af::dtype::f32, -0.5, 0.5).value(),
                                 af::tensor::zeros({32}, af::dtype::f32).value(),
                                 af::random_uniform({32, 1}, 3, af::dtype::f32, -0.5, 0.5).value()};

  auto concrete = step.concrete({{af::dtype::f32, {512, 2}}, {af::dtype::f32, {512, 1}}, {af::dtype::f32, {2, 32}},
                                 {af::dtype::f32, {32}}, {af::dtype::f32, {32, 1}}});
  if (!concrete) {
    std::fprintf(stderr, "%s\n", concrete.error_value().to_string().c_str());
    return 1;
  }
  const auto& g = (*concrete)->optimized;
  std::printf("traced %zu nodes, optimised to %zu (%zu fused kernels)\n", (*concrete)->traced.size(), g.size(),
              g.count("fused"));

  af::runtime rt;
  auto exec = af::graph_executor::launch(rt, g);
  if (!exec) {
    std::fprintf(stderr, "%s\n", exec.error_value().to_string().c_str());
    return 1;
  }
  for (int i = 0; i <= 300; ++i) {
    auto out = exec->run({inputs, target, params[0], params[1], params[2]});
    if (!out) {
      std::fprintf(stderr, "step %d: %s\n", i, out.error_value().to_string().c_str());
      return 1;
    }
    if (i % 50 == 0) std::printf("step %3d  loss %.5f\n", i, (*out)[0].item<double>());
    params = {(*out)[1], (*out)[2], (*out)[3]};
  }
  return 0;
}
