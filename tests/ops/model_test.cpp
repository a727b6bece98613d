// af::nn::model: structure and summary, layer outputs and gradients against a reference computed
// here in double, dropout masks, multi-input/output models, bad batches, and exact resumption
// from state().

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <set>
#include <vector>

#include "ops/random.hpp"
#include "ops/train/layers.hpp"
#include "ops/train/model.hpp"

using namespace af;

namespace {

tensor f32(const std::vector<float>& v, shape dims) { return tensor::from_vector<float>(v, dims); }

std::vector<double> as_doubles(const tensor& t) { return t.to_vector<double>(); }

/// A reference of the chain conv2d(3x3, same) -> relu -> pool -> flatten -> dense, in double, on
/// one NHWC batch; weights in the model's order (conv kernel, conv bias, dense kernel, dense bias).
struct chain_reference {
  int64_t n, h, w, c, filters, units;
  bool max_pool;

  std::vector<double> forward(const std::vector<double>& x, const std::vector<std::vector<double>>& p) const {
    const auto& k = p[0];
    const auto& kb = p[1];
    std::vector<double> conv(static_cast<std::size_t>(n * h * w * filters));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j)
          for (int64_t f = 0; f < filters; ++f) {
            double s = kb[static_cast<std::size_t>(f)];
            for (int64_t di = 0; di < 3; ++di)
              for (int64_t dj = 0; dj < 3; ++dj) {
                const int64_t ii = i + di - 1, jj = j + dj - 1;
                if (ii < 0 || jj < 0 || ii >= h || jj >= w) continue;
                for (int64_t ch = 0; ch < c; ++ch)
                  s += x[static_cast<std::size_t>(((b * h + ii) * w + jj) * c + ch)] *
                       k[static_cast<std::size_t>(((di * 3 + dj) * c + ch) * filters + f)];
              }
            conv[static_cast<std::size_t>(((b * h + i) * w + j) * filters + f)] = std::max(s, 0.0);
          }
    const int64_t ph = h / 2, pw = w / 2, flat = ph * pw * filters;
    std::vector<double> pooled(static_cast<std::size_t>(n * flat));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < ph; ++i)
        for (int64_t j = 0; j < pw; ++j)
          for (int64_t f = 0; f < filters; ++f) {
            double acc = max_pool ? -1e300 : 0.0;
            for (int64_t di = 0; di < 2; ++di)
              for (int64_t dj = 0; dj < 2; ++dj) {
                const double v = conv[static_cast<std::size_t>(((b * h + 2 * i + di) * w + 2 * j + dj) * filters + f)];
                acc = max_pool ? std::max(acc, v) : acc + v / 4;
              }
            pooled[static_cast<std::size_t>(b * flat + (i * pw + j) * filters + f)] = acc;
          }
    std::vector<double> out(static_cast<std::size_t>(n * units));
    for (int64_t b = 0; b < n; ++b)
      for (int64_t u = 0; u < units; ++u) {
        double s = p[3][static_cast<std::size_t>(u)];
        for (int64_t q = 0; q < flat; ++q) s += pooled[static_cast<std::size_t>(b * flat + q)] * p[2][static_cast<std::size_t>(q * units + u)];
        out[static_cast<std::size_t>(b * units + u)] = s;
      }
    return out;
  }

  /// Mean squared error against `y`.
  double loss(const std::vector<double>& x, const std::vector<std::vector<double>>& p, const std::vector<double>& y) const {
    const auto out = forward(x, p);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += (out[i] - y[i]) * (out[i] - y[i]);
    return s / static_cast<double>(out.size());
  }
};

nn::model conv_chain(bool max_pool, uint64_t seed) {
  auto m = nn::model::sequential(nn::input({4, 4, 2}, dtype::f32, "image"),
                                 {nn::conv2d(3, {3, 3}, {.padding = padding_mode::same, .activation = "relu"}),
                                  max_pool ? nn::max_pool2d() : nn::avg_pool2d(), nn::flatten(), nn::dense(2)},
                                 {.seed = seed});
  REQUIRE(m);
  return std::move(*m);
}

}  // namespace

TEST_CASE("a sequential model's summary lists layers, output shapes and parameter counts", "[model]") {
  auto m = nn::model::sequential(nn::input({64}, dtype::f32, "pixels"),
                                 {nn::dense(32, {.activation = "relu", .name = "hidden"}), nn::dropout(0.5, "drop"),
                                  nn::dense(10, {.name = "logits"})},
                                 {.name = "mlp"});
  REQUIRE(m);
  CHECK(m->parameter_count() == 64 * 32 + 32 + 32 * 10 + 10);
  const auto text = m->summary();
  INFO(text);
  CHECK(text.find("Model: \"mlp\"") != std::string::npos);
  CHECK(text.find("pixels (InputLayer)") != std::string::npos);
  CHECK(text.find("hidden (Dense)") != std::string::npos);
  CHECK(text.find("(None, 32)") != std::string::npos);
  CHECK(text.find("2,080") != std::string::npos);
  CHECK(text.find("Total params: 2,410") != std::string::npos);
  CHECK(text.find("Non-trainable params: 0") != std::string::npos);
  REQUIRE(m->weights().size() == 4);
  CHECK(m->weights()[0].name == "hidden/kernel");
  CHECK(m->weight_values()[0].shape() == shape{64, 32});
}

TEST_CASE("conv2d, pooling, flatten and dense layers match a reference in output and gradient", "[model]") {
  for (bool max_pool : {true, false}) {
    INFO((max_pool ? "max pool" : "average pool"));
    auto m = conv_chain(max_pool, 3);
    const chain_reference ref{2, 4, 4, 2, 3, 2, max_pool};
    auto x = random_normal({2, 4, 4, 2}, 11).value();
    auto y = random_normal({2, 2}, 12).value();
    // Non-zero biases so that every path carries signal.
    auto values = m.weight_values();
    values[1] = f32({0.1f, -0.05f, 0.2f}, {3});
    values[3] = f32({0.3f, -0.2f}, {2});
    REQUIRE(m.set_weight_values(values));
    std::vector<std::vector<double>> p;
    for (const auto& v : values) p.push_back(as_doubles(v));

    auto out = m.predict_on_batch({x});
    REQUIRE(out);
    const auto expected_out = ref.forward(as_doubles(x), p);
    const auto got = as_doubles((*out)[0]);
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected_out[i]).margin(1e-5));

    // One SGD step with learning rate 1 moves each weight by minus its gradient.
    REQUIRE(m.compile({.optimizer = optimizers::optimizer::sgd({.learning_rate = 1.0}), .loss = {nn::mean_squared_error()}}));
    auto step = m.train_on_batch({x}, {y});
    REQUIRE(step);
    CHECK(step->loss == Approx(ref.loss(as_doubles(x), p, as_doubles(y))).epsilon(1e-5));
    for (std::size_t w = 0; w < p.size(); ++w) {
      const auto after = as_doubles(m.weight_values()[w]);
      for (std::size_t i = 0; i < p[w].size(); ++i) {
        auto up = p, down = p;
        up[w][i] += 1e-6;
        down[w][i] -= 1e-6;
        const double numeric = (ref.loss(as_doubles(x), up, as_doubles(y)) - ref.loss(as_doubles(x), down, as_doubles(y))) / 2e-6;
        INFO("weight " << m.weights()[w].name << " element " << i);
        CHECK(p[w][i] - after[i] == Approx(numeric).margin(2e-4).epsilon(1e-3));
      }
    }
  }
}

TEST_CASE("global average pooling and reshape layers keep the batch axis", "[model]") {
  auto m = nn::model::sequential(nn::input({2, 3, 4}, dtype::f32, "x"),
                                 {nn::global_average_pooling2d(), nn::reshape({2, -1})});
  REQUIRE(m);
  CHECK(m->output_specs()[0].dims == shape{2, 2});
  auto x = random_normal({5, 2, 3, 4}, 1).value();
  auto out = m->predict_on_batch({x});
  REQUIRE(out);
  REQUIRE((*out)[0].shape() == shape{5, 2, 2});
  const auto xs = as_doubles(x), ys = as_doubles((*out)[0]);
  for (int b = 0; b < 5; ++b)
    for (int ch = 0; ch < 4; ++ch) {
      double mean = 0;
      for (int s = 0; s < 6; ++s) mean += xs[static_cast<std::size_t>((b * 6 + s) * 4 + ch)] / 6;
      CHECK(ys[static_cast<std::size_t>(b * 4 + ch)] == Approx(mean).margin(1e-6));
    }
}

TEST_CASE("dropout draws a mask per seed, repeats it for the same seed and is off when predicting", "[model]") {
  auto m = nn::model::sequential(nn::input({1000}, dtype::f32, "x"), {nn::dropout(0.3)});
  REQUIRE(m);
  REQUIRE(m->compile({.loss = {nn::mean_squared_error()}}));
  auto x = tensor::full({2, 1000}, 1.0, dtype::f32).value();
  auto y = tensor::zeros({2, 1000}, dtype::f32).value();
  auto a = m->train_on_batch({x}, {y}, 1), b = m->train_on_batch({x}, {y}, 1), c = m->train_on_batch({x}, {y}, 2);
  REQUIRE((a && b && c));
  const auto va = as_doubles(a->predictions[0]), vb = as_doubles(b->predictions[0]), vc = as_doubles(c->predictions[0]);
  CHECK(va == vb);
  CHECK(va != vc);
  int zeros = 0;
  for (double v : va) {
    CHECK((v == 0.0 || v == Approx(1.0 / 0.7)));
    zeros += v == 0.0;
  }
  CHECK(zeros > 2000 * 0.25);
  CHECK(zeros < 2000 * 0.35);
  auto predicted = m->predict_on_batch({x});
  REQUIRE(predicted);
  for (double v : as_doubles((*predicted)[0])) CHECK(v == 1.0);
}

TEST_CASE("a functional model with two inputs and two outputs weighs both losses", "[model]") {
  auto a = nn::input({4}, dtype::f32, "a");
  auto b = nn::input({3}, dtype::f32, "b");
  auto joined = nn::concatenate()({a, b});
  auto hidden = nn::dense(8, {.activation = "tanh", .name = "shared"})(joined);
  auto classes = nn::dense(3, {.name = "classes"})(hidden);
  auto value = nn::dense(1, {.name = "value"})(hidden);
  auto m = nn::model::functional({a, b}, {classes, value}, {.name = "two_heads"});
  REQUIRE(m);
  CHECK(m->summary().find("Connected to") != std::string::npos);
  CHECK(m->input_names() == std::vector<std::string>{"a", "b"});
  REQUIRE(m->compile({.optimizer = optimizers::optimizer::adam({.learning_rate = 0.05}),
                      .loss = {nn::sparse_categorical_crossentropy(), nn::mean_squared_error()},
                      .loss_weights = {1.0, 0.5},
                      .metrics = {"accuracy"}}));
  auto xa = random_normal({16, 4}, 1).value(), xb = random_normal({16, 3}, 2).value();
  std::vector<int64_t> ids(16);
  for (int i = 0; i < 16; ++i) ids[static_cast<std::size_t>(i)] = i % 3;
  auto labels = tensor::from_vector<int64_t>(ids);
  auto targets = random_normal({16, 1}, 3).value();
  auto first = m->train_on_batch({xa, xb}, {labels, targets});
  REQUIRE(first);
  CHECK(first->loss == Approx(first->output_loss[0] + 0.5 * first->output_loss[1]).epsilon(1e-5));
  double last = first->loss;
  for (int i = 0; i < 100; ++i) {
    auto r = m->train_on_batch({xa, xb}, {labels, targets});
    REQUIRE(r);
    last = r->loss;
  }
  CHECK(last < first->loss * 0.2);
}

TEST_CASE("a model refuses layers that do not fit and inputs it does not list", "[model]") {
  auto x = nn::input({64}, dtype::f32, "x");
  auto bad = nn::dense(4)(nn::conv2d(8, {3, 3}, {.name = "conv_on_vectors"})(x));
  auto m = nn::model::functional({x}, {bad});
  REQUIRE_FALSE(m);
  INFO(m.error_value().message);
  CHECK(m.error_value().message.find("conv_on_vectors") != std::string::npos);
  CHECK(m.error_value().message.find("f32[64]") != std::string::npos);

  auto other = nn::input({64}, dtype::f32, "other");
  auto sum = nn::add()({x, other});
  auto missing = nn::model::functional({x}, {sum});
  REQUIRE_FALSE(missing);
  CHECK(missing.error_value().message.find("'other'") != std::string::npos);
}

TEST_CASE("train_on_batch rejects a bad batch by name and leaves the model unchanged", "[model]") {
  auto m = nn::model::sequential(nn::input({6}, dtype::f32, "image"), {nn::dense(4)});
  REQUIRE(m);
  REQUIRE(m->compile({.loss = {nn::sparse_categorical_crossentropy()}}));
  const auto before = as_doubles(m->weight_values()[0]);
  auto x = random_normal({3, 6}, 5).value();

  auto out_of_range = m->train_on_batch({x}, {tensor::from_vector<int64_t>({0, 4, 1})});
  REQUIRE_FALSE(out_of_range);
  CHECK(out_of_range.error_value().code == errc::out_of_range);
  CHECK(out_of_range.error_value().message.find("row 1: class id 4 is outside [0, 4)") != std::string::npos);

  auto wrong_shape = m->train_on_batch({random_normal({3, 5}, 5).value()}, {tensor::from_vector<int64_t>({0, 1, 2})});
  REQUIRE_FALSE(wrong_shape);
  CHECK(wrong_shape.error_value().message.find("input 'image' must be f32[3,6], got f32[3,5]") != std::string::npos);

  auto nan_input = x.contiguous().value();
  nan_input.data<float>()[4] = std::nanf("");
  auto nan_loss = m->train_on_batch({nan_input}, {tensor::from_vector<int64_t>({0, 1, 2})});
  REQUIRE_FALSE(nan_loss);
  CHECK(nan_loss.error_value().message.find("the loss is NaN") != std::string::npos);

  CHECK(as_doubles(m->weight_values()[0]) == before);
  CHECK(m->updates_done() == 0);
}

TEST_CASE("state() restores weights, slots and the count so training continues identically", "[model]") {
  auto make = [] {
    auto m = nn::model::sequential(nn::input({5}, dtype::f32, "x"),
                                   {nn::dense(7, {.activation = "relu", .name = "h"}), nn::dropout(0.2, "d"), nn::dense(3, {.name = "o"})},
                                   {.seed = 9});
    REQUIRE(m);
    REQUIRE(m->compile({.optimizer = optimizers::optimizer::adam({.learning_rate = 0.01}),
                        .learning_rate = schedules::cosine_decay(0.01, 10),
                        .loss = {nn::sparse_categorical_crossentropy()}}));
    return std::move(*m);
  };
  auto x = random_normal({8, 5}, 1).value();
  auto y = tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1});
  auto a = make();
  for (uint64_t s = 0; s < 3; ++s) REQUIRE(a.train_on_batch({x}, {y}, s));
  const auto saved = a.state();
  for (uint64_t s = 3; s < 6; ++s) REQUIRE(a.train_on_batch({x}, {y}, s));

  auto b = make();
  REQUIRE(b.load_state(saved));
  CHECK(b.updates_done() == 3);
  CHECK(b.learning_rate() != a.learning_rate());  // a is 3 updates further on the schedule
  for (uint64_t s = 3; s < 6; ++s) REQUIRE(b.train_on_batch({x}, {y}, s));
  for (std::size_t i = 0; i < a.weight_values().size(); ++i) CHECK(as_doubles(a.weight_values()[i]) == as_doubles(b.weight_values()[i]));

  auto wrong = saved;
  wrong[0].value = tensor::zeros({2, 2}, dtype::f32).value();
  auto refused = b.load_state(wrong);
  REQUIRE_FALSE(refused);
  CHECK(refused.error_value().message.find("h/kernel") != std::string::npos);
}

TEST_CASE("the training step is traced once per batch shape", "[model]") {
  auto m = nn::model::sequential(nn::input({4}, dtype::f32, "x"), {nn::dense(2)});
  REQUIRE(m);
  REQUIRE(m->compile({.loss = {nn::mean_squared_error()}}));
  for (int i = 0; i < 5; ++i) REQUIRE(m->train_on_batch({random_normal({16, 4}, i).value()}, {tensor::zeros({16, 2}, dtype::f32).value()}));
  REQUIRE(m->train_on_batch({random_normal({7, 4}, 9).value()}, {tensor::zeros({7, 2}, dtype::f32).value()}));
  CHECK(m->train_traces() == 2);
  CHECK(m->updates_done() == 6);
}

TEST_CASE("batch normalization in a model moves its statistics when training and uses them when predicting", "[model]") {
  auto m = nn::model::sequential(nn::input({3}, dtype::f32, "x"), {nn::batch_normalization({.momentum = 0.5, .name = "bn"})});
  REQUIRE(m);
  REQUIRE(m->compile({.optimizer = optimizers::optimizer::sgd({.learning_rate = 0.0}), .loss = {nn::mean_squared_error()}}));
  auto x = f32({1, 2, 3, 3, 6, 9}, {2, 3});  // per-feature means 2, 4, 6; biased variances 1, 4, 9
  REQUIRE(m->train_on_batch({x}, {tensor::zeros({2, 3}, dtype::f32).value()}));
  REQUIRE(m->weights()[2].name == "bn/moving_mean");
  CHECK_FALSE(m->weights()[2].trainable);
  const auto mean = as_doubles(m->weight_values()[2]), var = as_doubles(m->weight_values()[3]);
  const double want_mean[] = {1, 2, 3}, want_var[] = {1, 2.5, 5};  // 0.5 * initial + 0.5 * batch
  for (int i = 0; i < 3; ++i) {
    CHECK(mean[static_cast<std::size_t>(i)] == Approx(want_mean[i]));
    CHECK(var[static_cast<std::size_t>(i)] == Approx(want_var[i]));
  }
  auto predicted = m->predict_on_batch({x});
  REQUIRE(predicted);
  const auto y = as_doubles((*predicted)[0]);
  CHECK(y[0] == Approx((1 - 1) / std::sqrt(1 + 1e-3)));
  CHECK(y[4] == Approx((6 - 2) / std::sqrt(2.5 + 1e-3)));
  CHECK(m->summary().find("Non-trainable params: 6") != std::string::npos);
}

TEST_CASE("two models built alike in one process name their weights alike and load each other's state", "[model]") {
  auto make = [](uint64_t seed) {
    auto x = nn::input({4});
    auto h = nn::dense(8, {.activation = "relu"})(x);
    auto named = nn::dense(3, {.name = "dense_1"})(h);  // the user took the name the next one would get
    auto y = nn::dense(2)(named);
    return nn::model::functional({x}, {y}, {.seed = seed}).value();
  };
  auto a = make(1);
  auto b = make(2);  // its layers' process-wide names are dense_2, dense_3
  std::vector<std::string> names;
  for (const auto& w : b.weights()) names.push_back(w.name);
  CHECK(names == std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias",
                                          "dense_2/kernel", "dense_2/bias"});
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(a.weights()[i].name == names[i]);
  CHECK(a.summary().find("dense_2 (Dense)") != std::string::npos);
  REQUIRE(b.load_state(a.state()));
  for (std::size_t i = 0; i < names.size(); ++i)
    CHECK(b.weight_values()[i].to_vector<float>() == a.weight_values()[i].to_vector<float>());
}

TEST_CASE("compute_gradients hands over each gradient as the backward pass makes it, and apply_gradients equals a fused step", "[cpu]") {
  auto build = [] {
    auto m = nn::model::sequential(nn::input({6}, dtype::f32, "x"),
                                   {nn::dense(8, {.activation = "relu", .name = "h"}), nn::dense(3, {.name = "o"})}, {.seed = 9});
    REQUIRE(m);
    REQUIRE(m->compile({.optimizer = optimizers::optimizer::adam({.learning_rate = 0.01}), .loss = {nn::sparse_categorical_crossentropy()}}));
    return std::move(*m);
  };
  auto fused = build();
  auto split = build();
  auto x = random_normal({5, 6}, 3).value();
  auto y = tensor::from_vector<int64_t>({0, 1, 2, 1, 0});
  for (int step = 0; step < 3; ++step) {
    std::vector<std::pair<std::size_t, tensor>> seen;
    auto g = split.compute_gradients({x}, {y}, 0, 1.0, [&](std::size_t k, const tensor& t) { seen.emplace_back(k, t); });
    REQUIRE(g);
    REQUIRE(seen.size() == split.trainable_indices().size());
    std::set<std::size_t> each;
    for (const auto& [k, t] : seen) {
      each.insert(k);
      CHECK(t.to_vector<float>() == g->gradients[k].to_vector<float>());
    }
    CHECK(each.size() == seen.size());  // every gradient once
    CHECK(seen.front().first > seen.back().first);  // the last layer's gradients come first
    REQUIRE(split.apply_gradients(g->gradients, g->non_trainable, split.learning_rate()));
    auto f = fused.train_on_batch({x}, {y}, 0);
    REQUIRE(f);
    CHECK(g->batch.loss == Approx(f->loss).epsilon(1e-6));
  }
  CHECK(split.updates_done() == 3);
  for (std::size_t i = 0; i < split.weight_values().size(); ++i) {
    const auto a = split.weight_values()[i].to_vector<float>(), b = fused.weight_values()[i].to_vector<float>();
    for (std::size_t k = 0; k < a.size(); ++k) CHECK(a[k] == Approx(b[k]).epsilon(1e-5).margin(1e-7));
  }
  // A gradient of another shape is refused, naming the weight, and changes nothing.
  const auto before = split.weight_values();
  auto wrong = split.apply_gradients({tensor::zeros({2}, dtype::f32).value(), tensor::zeros({8}, dtype::f32).value(),
                                      tensor::zeros({8, 3}, dtype::f32).value(), tensor::zeros({3}, dtype::f32).value()},
                                     {}, 0.1);
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.error_value().message, Catch::Contains("h/kernel"));
  CHECK(split.updates_done() == 3);
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(split.weight_values()[i].to_vector<float>() == before[i].to_vector<float>());
}
