// One training step (forward, backward, optimizer update) of an af::nn::model, timed:
//   MLP 784-512-512-10 (ReLU), batch 256, Adam;
//   CNN 32x32x3 -> conv3x3 32 -> maxpool 2 -> conv3x3 64 -> maxpool 2 -> dense 128 -> dense 10
//   (ReLU, 'same' convolutions, NHWC), batch 128, SGD with momentum 0.9;
// both on synthetic data in memory, sparse categorical cross-entropy, via model::train_on_batch.
// The baseline in the same run is the same step written by hand with af::function (weights and
// slots threaded through explicitly): its ratio is what the model layer costs.
// bench/torch_train_reference.py times the same two models in PyTorch. A third figure: one epoch of
// fit (batches fed by the pipeline's actors) against the same steps in a plain loop.
// The model's steps are called from this (plain) thread while a runtime lives, so each is a request
// to the runtime's device actor (ops/runtime/executor.hpp), as in a user's loop; *_step_direct_ms
// times the same steps with no runtime alive, run on this thread as before the one executor, and
// *_executor_vs_direct is what the request costs.
//
//   build/bench/bench_train_step [--quick] [--mlp-only | --cnn-only] [--lazy] [--pipeline-polls]
// (--mlp-only/--cnn-only are for profiling; fit runs with runtime_options{.idle_polls = 50}, a
// trainer's setting: --pipeline-polls uses the default of 500, --lazy CAF's own idle polling)
// Last line: one JSON object (mlp_step_ms, cnn_step_ms, their min and max, the hand-traced
// baselines and the ratios, the fit epoch against the loop, traces).

#include <cstdio>
#include <cstdlib>

#include <tuple>

#include "actors/runtime.hpp"
#include "bench_common.hpp"
#include "ops/runtime/function.hpp"
#include "ops/parallel.hpp"
#include "ops/random.hpp"
#include "ops/train/initializers.hpp"
#include "ops/train/layers.hpp"
#include "ops/train/losses.hpp"
#include "ops/train/model.hpp"
#include "ops/train/optimizers.hpp"
#include "training/trainer.hpp"

namespace {

using af::sym;
using af::tensor;

template <class T>
T ok(af::expected<T> v, const char* what) {
  if (!v) {
    std::fprintf(stderr, "bench_train_step: %s: %s\n", what, v.error_value().to_string().c_str());
    std::exit(1);
  }
  return std::move(*v);
}

tensor labels_for(int64_t n, uint64_t seed) {
  auto u = ok(af::random_uniform({n}, seed, af::dtype::f32, 0.0, 10.0), "labels");
  auto y = ok(tensor::empty({n}, af::dtype::i64), "labels");
  for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(u.data<float>()[i]) % 10;
  return y;
}

// A model as weights and a forward function; the step adds the loss, gradients and update.
struct model {
  std::vector<tensor> weights;
  std::function<sym(const sym& x, const std::vector<sym>& w)> forward;
};

model mlp() {
  model m;
  const int64_t sizes[] = {784, 512, 512, 10};
  for (int l = 0; l < 3; ++l) {
    m.weights.push_back(ok(af::initializers::glorot_uniform({sizes[l], sizes[l + 1]}, 10 + l), "weights"));
    m.weights.push_back(ok(tensor::zeros({sizes[l + 1]}, af::dtype::f32), "bias"));
  }
  m.forward = [](const sym& x, const std::vector<sym>& w) {
    auto h = af::relu(af::matmul(x, w[0]) + w[1]);
    h = af::relu(af::matmul(h, w[2]) + w[3]);
    return af::matmul(h, w[4]) + w[5];
  };
  return m;
}

model cnn() {
  model m;
  m.weights = {ok(af::initializers::he_normal({3, 3, 3, 32}, 20), "conv1"), ok(tensor::zeros({32}, af::dtype::f32), "b1"),
               ok(af::initializers::he_normal({3, 3, 32, 64}, 21), "conv2"), ok(tensor::zeros({64}, af::dtype::f32), "b2"),
               ok(af::initializers::glorot_uniform({8 * 8 * 64, 128}, 22), "dense1"),
               ok(tensor::zeros({128}, af::dtype::f32), "b3"),
               ok(af::initializers::glorot_uniform({128, 10}, 23), "dense2"), ok(tensor::zeros({10}, af::dtype::f32), "b4")};
  m.forward = [](const sym& x, const std::vector<sym>& w) {
    const af::conv2d_options same{.padding = af::padding_mode::same};
    auto h = af::max_pool2d(af::relu(af::conv2d(x, w[0], same) + w[1]));
    h = af::max_pool2d(af::relu(af::conv2d(h, w[2], same) + w[3]));
    const int64_t batch = x.dims()[0];
    h = af::relu(af::matmul(af::reshape(h, {batch, 8 * 8 * 64}), w[4]) + w[5]);
    return af::matmul(h, w[6]) + w[7];
  };
  return m;
}

struct timing {
  double median_ms, min_ms, max_ms;
  int64_t traces;
  double first_loss, last_loss;
};

// Runs `steps` training steps of `m` on (x, y) with `opt`; times each after two warm-up steps.
timing time_steps(model m, const tensor& x, const tensor& y, const af::optimizers::optimizer& opt, int steps) {
  const std::size_t n = m.weights.size(), k = opt.slots_per_variable() * n;
  af::function step{[&](const std::vector<sym>& in) {
    const std::vector<sym> w(in.begin() + 2, in.begin() + 2 + static_cast<std::ptrdiff_t>(n));
    const std::vector<sym> slots(in.begin() + 2 + static_cast<std::ptrdiff_t>(n),
                                 in.begin() + 2 + static_cast<std::ptrdiff_t>(n + k));
    auto loss = af::losses::sparse_categorical_crossentropy(in[1], m.forward(in[0], w));
    auto next = opt.apply(w, af::gradients(loss, w), slots, in[in.size() - 2], in[in.size() - 1]);
    std::vector<sym> out{loss};
    out.insert(out.end(), next.variables.begin(), next.variables.end());
    out.insert(out.end(), next.slots.begin(), next.slots.end());
    return out;
  }};
  auto slots = ok(opt.initial_slots(m.weights), "slots");
  std::vector<double> seconds;
  timing t{};
  for (int s = 0; s < steps + 2; ++s) {
    std::vector<tensor> args{x, y};
    args.insert(args.end(), m.weights.begin(), m.weights.end());
    args.insert(args.end(), slots.begin(), slots.end());
    args.push_back(tensor::scalar(static_cast<float>(opt.learning_rate())));
    args.push_back(tensor::scalar(static_cast<float>(s)));
    std::vector<tensor> out;
    const double took = af::bench::seconds_of([&] { out = ok(step(args), "step"); });
    if (s >= 2) seconds.push_back(took);
    const double loss = out[0].item<double>();
    if (s == 0) t.first_loss = loss;
    t.last_loss = loss;
    m.weights.assign(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(n));
    slots.assign(out.begin() + 1 + static_cast<std::ptrdiff_t>(n), out.end());
  }
  t.median_ms = 1e3 * af::bench::median(seconds);
  t.min_ms = 1e3 * *std::min_element(seconds.begin(), seconds.end());
  t.max_ms = 1e3 * *std::max_element(seconds.begin(), seconds.end());
  t.traces = step.trace_count();
  return t;
}

af::nn::model mlp_model() {
  return ok(af::nn::model::sequential(af::nn::input({784}, af::dtype::f32, "x"),
                                      {af::nn::dense(512, {.activation = "relu"}), af::nn::dense(512, {.activation = "relu"}),
                                       af::nn::dense(10)}),
            "mlp model");
}

af::nn::model cnn_model() {
  const af::nn::conv_options same{.padding = af::padding_mode::same, .activation = "relu", .kernel_initializer = "he_normal"};
  return ok(af::nn::model::sequential(af::nn::input({32, 32, 3}, af::dtype::f32, "x"),
                                      {af::nn::conv2d(32, {3, 3}, same), af::nn::max_pool2d(), af::nn::conv2d(64, {3, 3}, same),
                                       af::nn::max_pool2d(), af::nn::flatten(), af::nn::dense(128, {.activation = "relu"}),
                                       af::nn::dense(10)}),
            "cnn model");
}

// `steps` train_on_batch calls after two warm-up ones.
timing time_model(af::nn::model m, const tensor& x, const tensor& y, const af::optimizers::optimizer& opt, int steps) {
  if (auto c = m.compile({.optimizer = opt, .loss = {af::nn::sparse_categorical_crossentropy()}}); !c) {
    std::fprintf(stderr, "bench_train_step: compile: %s\n", c.error_value().to_string().c_str());
    std::exit(1);
  }
  std::vector<double> seconds;
  timing t{};
  for (int s = 0; s < steps + 2; ++s) {
    af::nn::batch_result r;
    const double took = af::bench::seconds_of([&] { r = ok(m.train_on_batch({x}, {y}), "train_on_batch"); });
    if (s >= 2) seconds.push_back(took);
    if (s == 0) t.first_loss = r.loss;
    t.last_loss = r.loss;
  }
  t.median_ms = 1e3 * af::bench::median(seconds);
  t.min_ms = 1e3 * *std::min_element(seconds.begin(), seconds.end());
  t.max_ms = 1e3 * *std::max_element(seconds.begin(), seconds.end());
  t.traces = m.train_traces();
  return t;
}

// fit over an in-memory dataset (slices -> batch -> prefetch, through the pipeline's actors) against
// the same train_on_batch calls in a plain loop over the same batches: what feeding by the pipeline
// costs per epoch. Returns {fit seconds, loop seconds}, medians of `reps` epochs each, alternated.
std::pair<double, double> time_fit_vs_loop(const tensor& x, const tensor& y, int64_t batch, int reps, bool eager,
                                           int idle_polls) {
  af::runtime rt{{.eager_stealing = eager, .idle_polls = idle_polls}};
  const auto ds = af::data::dataset::from_tensor_slices({{"x", x}, {"label", y}}).batch(static_cast<std::size_t>(batch)).prefetch(2);
  std::vector<tensor> xs, ys;
  for (int64_t r = 0; r + batch <= x.dim(0); r += batch) {
    xs.push_back(ok(ok(x.slice(0, r, r + batch), "slice").contiguous(), "batch"));
    ys.push_back(ok(ok(y.slice(0, r, r + batch), "slice").contiguous(), "batch"));
  }
  auto fitted = mlp_model(), looped = mlp_model();
  const auto adam = af::optimizers::optimizer::adam({.learning_rate = 1e-3});
  for (auto* m : {&fitted, &looped})
    if (auto c = m->compile({.optimizer = adam, .loss = {af::nn::sparse_categorical_crossentropy()}}); !c) std::exit(1);
  std::vector<double> fit_s, loop_s;
  for (int rep = 0; rep < reps + 1; ++rep) {
    const double f = af::bench::seconds_of([&] {
      ok(af::train::fit(rt, fitted, ds, {.epochs = 1, .verbose = af::train::verbosity::silent}), "fit");
    });
    const double l = af::bench::seconds_of([&] {
      for (std::size_t i = 0; i < xs.size(); ++i) ok(looped.train_on_batch({xs[i]}, {ys[i]}), "train_on_batch");
    });
    if (rep > 0) fit_s.push_back(f), loop_s.push_back(l);  // the first epoch traces
  }
  return {af::bench::median(fit_s), af::bench::median(loop_s)};
}

// Median microseconds of one call of a 16-float af::function: {on this thread with no runtime alive,
// as a request to a runtime's device actor}. The difference is the request's round trip.
std::pair<double, double> time_request(int calls) {
  af::function f{[](const std::vector<af::sym>& in) { return std::vector<af::sym>{in[0] * in[0] + in[0]}; }};
  const std::vector<tensor> args{tensor::from_vector<float>(std::vector<float>(16, 1.0f))};
  const auto per_call = [&] {
    std::vector<double> us;
    for (int i = 0; i < calls; ++i) us.push_back(1e6 * af::bench::seconds_of([&] { ok(f(args), "tiny function"); }));
    return af::bench::median(us);
  };
  (void)per_call();  // traces
  const double direct = per_call();
  af::runtime rt;
  return {direct, per_call()};
}

void report(const char* what, const timing& t, const timing& hand) {
  std::printf("%s: %.2f ms per step (%.2f-%.2f), loss %.3f -> %.3f, %lld trace(s); hand-traced %.2f ms (x%.2f)\n", what,
              t.median_ms, t.min_ms, t.max_ms, t.first_loss, t.last_loss, static_cast<long long>(t.traces), hand.median_ms,
              t.median_ms / hand.median_ms);
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv, "build/bench/bench_train_step [--quick] [--mlp-only | --cnn-only] [--lazy] [--pipeline-polls]", {"--quick", "--mlp-only", "--cnn-only", "--lazy", "--pipeline-polls"});
  const bool quick = af::bench::has_flag(argc, argv, "--quick");
  const bool run_mlp = !af::bench::has_flag(argc, argv, "--cnn-only");
  const bool run_cnn = !af::bench::has_flag(argc, argv, "--mlp-only");
  const int steps = quick ? 15 : 50;
  timing mlp_t{}, cnn_t{}, mlp_hand{}, cnn_hand{}, mlp_direct{}, cnn_direct{};
  if (run_mlp) {
    const auto mlp_x = ok(af::random_uniform({256, 784}, 1), "mlp input");
    const auto mlp_y = labels_for(256, 2);
    const auto adam = af::optimizers::optimizer::adam({.learning_rate = 1e-3});
    mlp_hand = time_steps(mlp(), mlp_x, mlp_y, adam, steps);
    mlp_direct = time_model(mlp_model(), mlp_x, mlp_y, adam, steps);
    {
      af::runtime rt;
      mlp_t = time_model(mlp_model(), mlp_x, mlp_y, adam, steps);
    }
    report("MLP 784-512-512-10, batch 256, Adam", mlp_t, mlp_hand);
  }
  double fit_s = 0, loop_s = 0;
  if (run_mlp) {
    const int64_t n = 256 * (quick ? 8 : 20);
    const bool eager = !af::bench::has_flag(argc, argv, "--lazy");
    // A trainer's setting (actors/runtime.hpp); --pipeline-polls measures the default instead.
    const int idle_polls = af::bench::has_flag(argc, argv, "--pipeline-polls") ? af::runtime_options{}.idle_polls : 50;
    std::tie(fit_s, loop_s) = time_fit_vs_loop(ok(af::random_uniform({n, 784}, 5), "fit input"), labels_for(n, 6), 256, quick ? 3 : 5, eager, idle_polls);
    std::printf("fit of one MLP epoch (%lld batches) through the pipeline: %.1f ms; the same steps in a plain loop: %.1f ms (x%.3f)\n",
                static_cast<long long>(n / 256), 1e3 * fit_s, 1e3 * loop_s, fit_s / loop_s);
  }
  if (run_cnn) {
    const auto cnn_x = ok(af::random_uniform({128, 32, 32, 3}, 3), "cnn input");
    const auto cnn_y = labels_for(128, 4);
    const auto momentum = af::optimizers::optimizer::sgd({.learning_rate = 0.01, .momentum = 0.9});
    cnn_hand = time_steps(cnn(), cnn_x, cnn_y, momentum, quick ? 5 : steps);
    cnn_direct = time_model(cnn_model(), cnn_x, cnn_y, momentum, quick ? 5 : steps);
    {
      af::runtime rt;
      cnn_t = time_model(cnn_model(), cnn_x, cnn_y, momentum, quick ? 5 : steps);
    }
    report("CNN conv32-pool-conv64-pool-dense128-dense10, batch 128, SGD momentum", cnn_t, cnn_hand);
  }
  const auto [direct_call_us, requested_call_us] = time_request(quick ? 2000 : 10000);
  std::printf("a 16-float af::function: %.1f us on this thread, %.1f us as a request to the runtime's device actor\n",
              direct_call_us, requested_call_us);
  af::bench::json_line json;
  json.add("bench", std::string{"train_step"});
  json.add("tiny_call_direct_us", direct_call_us);
  json.add("tiny_call_requested_us", requested_call_us);
  json.add("threads", static_cast<double>(af::thread_budget()));
  json.add("mlp_step_ms", mlp_t.median_ms);
  json.add("mlp_step_min_ms", mlp_t.min_ms);
  json.add("mlp_step_max_ms", mlp_t.max_ms);
  json.add("cnn_step_ms", cnn_t.median_ms);
  json.add("cnn_step_min_ms", cnn_t.min_ms);
  json.add("cnn_step_max_ms", cnn_t.max_ms);
  json.add("mlp_step_direct_ms", mlp_direct.median_ms);
  json.add("cnn_step_direct_ms", cnn_direct.median_ms);
  json.add("mlp_executor_vs_direct", mlp_direct.median_ms > 0 ? mlp_t.median_ms / mlp_direct.median_ms : 0.0);
  json.add("cnn_executor_vs_direct", cnn_direct.median_ms > 0 ? cnn_t.median_ms / cnn_direct.median_ms : 0.0);
  json.add("mlp_hand_traced_ms", mlp_hand.median_ms);
  json.add("cnn_hand_traced_ms", cnn_hand.median_ms);
  json.add("mlp_ratio_vs_hand_traced", mlp_hand.median_ms > 0 ? mlp_t.median_ms / mlp_hand.median_ms : 0.0);
  json.add("cnn_ratio_vs_hand_traced", cnn_hand.median_ms > 0 ? cnn_t.median_ms / cnn_hand.median_ms : 0.0);
  json.add("fit_epoch_ms", 1e3 * fit_s);
  json.add("loop_epoch_ms", 1e3 * loop_s);
  json.add("fit_ratio_vs_loop", loop_s > 0 ? fit_s / loop_s : 0.0);
  json.add("traces", static_cast<double>(mlp_t.traces + cnn_t.traces));
  json.print();
  return 0;
}
