// Optimizer update rules inside a traced step against the same rules computed here in double, step
// by step, with the slots carried from one step to the next as the training loop carries them.

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "graph_test_support.hpp"
#include "ops/runtime/function.hpp"
#include "ops/train/optimizers.hpp"

using namespace af;
using syms = std::vector<sym>;
using optimizers::optimizer;

namespace {

using vec = std::vector<double>;

// Runs `steps` updates of one f64 variable through a traced step; gradient k is grads[k].
// Returns the variable after each update.
std::vector<vec> run_traced(const optimizer& opt, vec w, const std::vector<vec>& grads, double lr) {
  const auto n = static_cast<int64_t>(w.size());
  function step{[&](const syms& in) {
    std::vector<sym> slots(in.begin() + 2, in.end() - 2);
    auto next = opt.apply({in[0]}, {in[1]}, slots, in[in.size() - 2], in[in.size() - 1]);
    syms out{next.variables[0]};
    out.insert(out.end(), next.slots.begin(), next.slots.end());
    return out;
  }};
  tensor var = tensor::from_vector<double>(w, {n});
  auto slots = opt.initial_slots({var}).value();
  std::vector<vec> seen;
  for (std::size_t k = 0; k < grads.size(); ++k) {
    std::vector<tensor> args{var, tensor::from_vector<double>(grads[k], {n})};
    args.insert(args.end(), slots.begin(), slots.end());
    args.push_back(tensor::scalar(lr));
    args.push_back(tensor::scalar(static_cast<double>(k)));
    auto out = step(args);
    if (!out) FAIL(out.error_value().to_string());
    var = out->at(0);
    slots.assign(out->begin() + 1, out->end());
    seen.push_back(var.to_vector<double>());
  }
  CHECK(step.trace_count() == 1);  // the learning rate and count are inputs: one trace serves all steps
  return seen;
}

void check_close_vec(const vec& got, const vec& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-15));
}

const std::vector<vec> gradients_seen = {{0.5, -1.0, 2.0}, {0.1, 0.3, -0.4}, {-0.2, 0.0, 1.0}};
const vec start = {1.0, -2.0, 0.5};

}  // namespace

TEST_CASE("sgd with and without momentum and nesterov follows Keras' rule", "[train][optimizers]") {
  for (double momentum : {0.0, 0.9})
    for (bool nesterov : {false, true}) {
      if (momentum == 0 && nesterov) continue;
      INFO("momentum " << momentum << " nesterov " << nesterov);
      auto got = run_traced(optimizer::sgd({.momentum = momentum, .nesterov = nesterov}), start, gradients_seen, 0.1);
      vec w = start, m(3, 0.0);
      for (std::size_t k = 0; k < gradients_seen.size(); ++k) {
        for (std::size_t i = 0; i < 3; ++i) {
          const double g = gradients_seen[k][i];
          m[i] = momentum * m[i] - 0.1 * g;
          w[i] = momentum == 0 ? w[i] - 0.1 * g : nesterov ? w[i] + momentum * m[i] - 0.1 * g : w[i] + m[i];
        }
        check_close_vec(got[k], w);
      }
    }
}

TEST_CASE("adam and adamw follow Keras' rule, bias correction included", "[train][optimizers]") {
  for (double decay : {0.0, 0.01}) {
    INFO("weight_decay " << decay);
    const optimizer opt = optimizer::adam({.weight_decay = decay});
    CHECK(opt.name() == (decay > 0 ? "adamw" : "adam"));
    auto got = run_traced(opt, start, gradients_seen, 0.01);
    vec w = start, m(3, 0.0), v(3, 0.0);
    for (std::size_t k = 0; k < gradients_seen.size(); ++k) {
      const double t = static_cast<double>(k + 1);
      const double alpha = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
      for (std::size_t i = 0; i < 3; ++i) {
        const double g = gradients_seen[k][i];
        w[i] -= w[i] * decay * 0.01;
        m[i] += (g - m[i]) * 0.1;
        v[i] += (g * g - v[i]) * 0.001;
        w[i] -= m[i] * alpha / (std::sqrt(v[i]) + 1e-7);
      }
      check_close_vec(got[k], w);
    }
  }
}

TEST_CASE("lamb scales adam's direction by the trust ratio", "[train][optimizers]") {
  auto got = run_traced(optimizer::lamb({.weight_decay = 0.01}), start, gradients_seen, 0.01);
  vec w = start, m(3, 0.0), v(3, 0.0);
  for (std::size_t k = 0; k < gradients_seen.size(); ++k) {
    const double t = static_cast<double>(k + 1);
    vec r(3);
    double w_norm = 0, r_norm = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      const double g = gradients_seen[k][i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      r[i] = (m[i] / (1 - std::pow(0.9, t))) / (std::sqrt(v[i] / (1 - std::pow(0.999, t))) + 1e-6) + 0.01 * w[i];
      w_norm += w[i] * w[i];
      r_norm += r[i] * r[i];
    }
    const double trust = std::sqrt(w_norm) / std::sqrt(r_norm);
    for (std::size_t i = 0; i < 3; ++i) w[i] -= 0.01 * trust * r[i];
    check_close_vec(got[k], w);
  }
}

TEST_CASE("gradient clipping by value, by norm and by global norm", "[train][optimizers]") {
  const vec g = {3.0, -4.0, 0.5};  // norm sqrt(25.25)
  auto one_step = [&](optimizers::clipping clip) {
    return run_traced(optimizer::sgd({.clip = clip}), {0.0, 0.0, 0.0}, {g}, 1.0).front();
  };
  check_close_vec(one_step({.value = 1.0}), {-1.0, 1.0, -0.5});
  const double norm = std::sqrt(25.25);
  check_close_vec(one_step({.norm = 2.0}), {-3.0 * 2 / norm, 4.0 * 2 / norm, -0.5 * 2 / norm});
  check_close_vec(one_step({.norm = 10.0}), {-3.0, 4.0, -0.5});  // within the norm: unchanged
  check_close_vec(one_step({.global_norm = 2.0}), {-3.0 * 2 / norm, 4.0 * 2 / norm, -0.5 * 2 / norm});
}

TEST_CASE("global-norm clipping scales every variable by the one norm of all gradients together", "[train][optimizers]") {
  // Three variables: clipping each by its own norm would give other directions than the joint
  // norm does (tf.clip_by_global_norm), so per-variable scaling cannot pass this test.
  const std::vector<vec> grads = {{3.0, -4.0}, {12.0}, {0.0, 0.0, 1.0}};
  const double joint = std::sqrt(9.0 + 16.0 + 144.0 + 1.0);  // sqrt(170)
  auto one_step = [&](optimizers::clipping clip) {
    const optimizer opt = optimizer::sgd({.clip = clip});
    function step{[&](const syms& in) { return opt.apply({in[0], in[1], in[2]}, {in[3], in[4], in[5]}, {}, in[6], in[7]).variables; }};
    std::vector<tensor> args;
    for (const auto& g : grads) args.push_back(tensor::from_vector<double>(vec(g.size(), 0.0), {static_cast<int64_t>(g.size())}));
    for (const auto& g : grads) args.push_back(tensor::from_vector<double>(g, {static_cast<int64_t>(g.size())}));
    args.push_back(tensor::scalar(1.0));
    args.push_back(tensor::scalar(0.0));
    auto out = step(args);
    if (!out) FAIL(out.error_value().to_string());
    std::vector<vec> updated;
    for (const auto& t : *out) updated.push_back(t.to_vector<double>());
    return updated;
  };
  const auto clipped = one_step({.global_norm = 5.0});
  REQUIRE(clipped.size() == 3);
  const double scale = 5.0 / joint;
  check_close_vec(clipped[0], {-3.0 * scale, 4.0 * scale});
  check_close_vec(clipped[1], {-12.0 * scale});
  check_close_vec(clipped[2], {0.0, 0.0, -1.0 * scale});
  // Below the limit nothing changes.
  const auto kept = one_step({.global_norm = 20.0});
  check_close_vec(kept[0], {-3.0, 4.0});
  check_close_vec(kept[1], {-12.0});
  check_close_vec(kept[2], {0.0, 0.0, -1.0});
}

TEST_CASE("an optimizer given gradients or slots that do not fit fails the trace naming them", "[train][optimizers]") {
  const optimizer opt = optimizer::adam();
  auto fails = [&](const function::body& body, const std::vector<tensor>& args, const std::string& expect) {
    function fn{body};
    auto out = fn(args);
    REQUIRE_FALSE(out);
    INFO(out.error_value().message);
    CHECK(out.error_value().message.find(expect) != std::string::npos);
    CHECK(out.error_value().message.find("optimizers_test.cpp:") != std::string::npos);
  };
  const tensor w = tensor::from_vector<double>({1, 2, 3}, {3}), g2 = tensor::from_vector<double>({1, 2}, {2});
  const tensor lr = tensor::scalar(0.1), count = tensor::scalar(0.0);
  fails([&](const syms& in) { return opt.apply({in[0]}, {in[1]}, {in[0], in[0]}, in[2], in[3]).variables; },
        {w, g2, lr, count}, "adam: gradient 0 f64[2] does not fit variable f64[3]");
  fails([&](const syms& in) { return opt.apply({in[0]}, {in[1]}, {in[0]}, in[2], in[3]).variables; }, {w, w, lr, count},
        "adam: 1 slots for 1 variables (2 each)");
  fails([&](const syms& in) { return opt.apply({in[0]}, {in[1]}, {in[0], in[0]}, in[1], in[3]).variables; },
        {w, w, lr, count}, "must be scalars");
}
