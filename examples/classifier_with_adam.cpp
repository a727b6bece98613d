// A softmax classifier trained by one traced step: Glorot-initialised weights, sparse categorical
// cross-entropy, Adam with its slots carried between steps, a warmup-then-cosine learning rate fed
// in per step (no retrace), and accuracy kept by a streaming metric.
//
//   build/examples/classifier_with_adam

#include <cmath>
#include <cstdio>

#include "ops/runtime/function.hpp"
#include "ops/random.hpp"
#include "ops/train/initializers.hpp"
#include "ops/train/losses.hpp"
#include "ops/train/metrics.hpp"
#include "ops/train/optimizers.hpp"
#include "ops/train/schedules.hpp"

int main() {
  using af::sym;
  // Three classes of points around (2, 0), (-1, 1.7) and (-1, -1.7).
  const int n = 600;
  auto noise = af::random_normal({n, 2}, /*seed=*/7).value();
  auto points = af::tensor::empty({n, 2}, af::dtype::f32).value();
  auto labels = af::tensor::empty({n}, af::dtype::i64).value();
  for (int i = 0; i < n; ++i) {
    const int c = i % 3;
    const double angle = 2.0943951 * c;
    points.data<float>()[2 * i] = static_cast<float>(2 * std::cos(angle)) + 0.5f * noise.data<float>()[2 * i];
    points.data<float>()[2 * i + 1] = static_cast<float>(2 * std::sin(angle)) + 0.5f * noise.data<float>()[2 * i + 1];
    labels.data<int64_t>()[i] = c;
  }

  const auto adam = af::optimizers::optimizer::adam({.learning_rate = 0.05});
  const auto learning_rate = af::schedules::linear_warmup(af::schedules::cosine_decay(adam.learning_rate(), 190), 10);
  // Inputs: x, labels, w, b, then Adam's slots (m_w, m_b, v_w, v_b), the learning rate, the count.
  af::function step{[&](const std::vector<sym>& in) {
    auto logits = af::matmul(in[0], in[2]) + in[3];
    auto loss = af::losses::sparse_categorical_crossentropy(in[1], logits);
    auto next = adam.apply({in[2], in[3]}, af::gradients(loss, {in[2], in[3]}), {in[4], in[5], in[6], in[7]}, in[8], in[9]);
    std::vector<sym> out{loss, logits};
    out.insert(out.end(), next.variables.begin(), next.variables.end());
    out.insert(out.end(), next.slots.begin(), next.slots.end());
    return out;
  }};

  std::vector<af::tensor> params{af::initializers::glorot_uniform({2, 3}, /*seed=*/1).value(),
                                 af::tensor::zeros({3}, af::dtype::f32).value()};
  auto slots = adam.initial_slots(params).value();
  for (int64_t k = 0; k < 200; ++k) {
    auto out = step({points, labels, params[0], params[1], slots[0], slots[1], slots[2], slots[3],
                     af::tensor::scalar(static_cast<float>(learning_rate(k))), af::tensor::scalar(static_cast<float>(k))});
    if (!out) {
      std::fprintf(stderr, "step %lld: %s\n", static_cast<long long>(k), out.error_value().to_string().c_str());
      return 1;
    }
    params = {(*out)[2], (*out)[3]};
    slots = {(*out)[4], (*out)[5], (*out)[6], (*out)[7]};
    if (k % 40 == 0 || k == 199) {
      auto accuracy = af::metrics::sparse_categorical_accuracy();
      if (auto ok = accuracy->update(labels, (*out)[1]); !ok) {
        std::fprintf(stderr, "%s\n", ok.error_value().to_string().c_str());
        return 1;
      }
      std::printf("step %3lld  lr %.4f  loss %.4f  accuracy %.3f\n", static_cast<long long>(k), learning_rate(k),
                  (*out)[0].item<double>(), accuracy->result());
    }
  }
  std::printf("traces: %lld\n", static_cast<long long>(step.trace_count()));
  return 0;
}
