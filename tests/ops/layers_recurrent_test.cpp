// Embedding, LSTM and GRU against step-by-step loops in double: outputs (last step and whole
// sequences), gradients for the input and every weight (central differences), Keras' weight
// layouts and starting values, the embedding gradient's scatter, and input errors.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "layer_test_support.hpp"
#include "ops/train/layers.hpp"

using namespace af;
using namespace layer_testing;

namespace {

double sigmoid_of(double v) { return 1 / (1 + std::exp(-v)); }

struct sequence_geometry {
  int64_t batch, steps, features, units;
};

// x[b, t, :] @ m [rows, cols] for one sample and step, or h @ m.
values row_times(const double* row, int64_t rows, const values& m, int64_t cols) {
  values out(static_cast<std::size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[static_cast<std::size_t>(j)] += row[i] * m[static_cast<std::size_t>(i * cols + j)];
  return out;
}

// Collects h per step: the last one [B, U] or all of them [B, T, U].
struct sequence_output {
  const sequence_geometry& g;
  bool return_sequences;
  values y;
  sequence_output(const sequence_geometry& geometry, bool all)
      : g(geometry), return_sequences(all),
        y(static_cast<std::size_t>(geometry.batch * (all ? geometry.steps : 1) * geometry.units)) {}
  void put(int64_t b, int64_t t, const values& h) {
    if (!return_sequences && t != g.steps - 1) return;
    const int64_t slot = return_sequences ? b * g.steps + t : b;
    for (int64_t j = 0; j < g.units; ++j) y[static_cast<std::size_t>(slot * g.units + j)] = h[static_cast<std::size_t>(j)];
  }
};

// Keras' LSTM cell, gates i, f, c, o: c' = f*c + i*tanh(zc), h' = o*tanh(c'); w = {kernel,
// recurrent_kernel[, bias]}.
values lstm_reference(const sequence_geometry& g, bool return_sequences, const values& x, const std::vector<values>& w) {
  const int64_t u = g.units;
  sequence_output out(g, return_sequences);
  for (int64_t b = 0; b < g.batch; ++b) {
    values h(static_cast<std::size_t>(u), 0.0), c(static_cast<std::size_t>(u), 0.0);
    for (int64_t t = 0; t < g.steps; ++t) {
      auto z = row_times(&x[static_cast<std::size_t>((b * g.steps + t) * g.features)], g.features, w[0], 4 * u);
      const auto zh = row_times(h.data(), u, w[1], 4 * u);
      for (int64_t j = 0; j < 4 * u; ++j) {
        const auto k = static_cast<std::size_t>(j);
        z[k] += zh[k] + (w.size() > 2 ? w[2][k] : 0.0);
      }
      for (int64_t j = 0; j < u; ++j) {
        const auto k = static_cast<std::size_t>(j);
        const double i = sigmoid_of(z[k]), f = sigmoid_of(z[k + u]), cc = std::tanh(z[k + 2 * u]),
                     o = sigmoid_of(z[k + 3 * u]);
        c[k] = f * c[k] + i * cc;
        h[k] = o * std::tanh(c[k]);
      }
      out.put(b, t, h);
    }
  }
  return out.y;
}

// Keras' GRU cell, gates z, r, h; h' = z*h + (1-z)*tanh(candidate). reset_after: bias [2, 3U] and
// candidate = x Wh + b_ih + r*(h Uh + b_rh); otherwise bias [3U] and candidate = x Wh + b_h + (r*h) Uh.
values gru_reference(const sequence_geometry& g, bool return_sequences, bool reset_after, const values& x,
                     const std::vector<values>& w) {
  const int64_t u = g.units;
  const auto uu = static_cast<std::size_t>(u);
  const bool use_bias = w.size() > 2;
  sequence_output out(g, return_sequences);
  for (int64_t b = 0; b < g.batch; ++b) {
    values h(uu, 0.0);
    for (int64_t t = 0; t < g.steps; ++t) {
      auto xz = row_times(&x[static_cast<std::size_t>((b * g.steps + t) * g.features)], g.features, w[0], 3 * u);
      auto hz = row_times(h.data(), u, w[1], 3 * u);  // h U for all three parts
      for (std::size_t k = 0; k < 3 * uu; ++k) {
        if (use_bias) xz[k] += w[2][k];                              // input bias (row 0, or the only one)
        if (use_bias && reset_after) hz[k] += w[2][3 * uu + k];      // recurrent bias (row 1)
      }
      values z(uu), r(uu), next(uu);
      for (std::size_t k = 0; k < uu; ++k) {
        z[k] = sigmoid_of(xz[k] + hz[k]);
        r[k] = sigmoid_of(xz[k + uu] + hz[k + uu]);
      }
      values candidate(uu);
      if (reset_after) {
        for (std::size_t k = 0; k < uu; ++k) candidate[k] = xz[k + 2 * uu] + r[k] * hz[k + 2 * uu];
      } else {
        values rh(uu);
        for (std::size_t k = 0; k < uu; ++k) rh[k] = r[k] * h[k];
        for (std::size_t k = 0; k < uu; ++k) {
          double s = xz[k + 2 * uu];
          for (std::size_t i = 0; i < uu; ++i) s += rh[i] * w[1][i * 3 * uu + 2 * uu + k];
          candidate[k] = s;
        }
      }
      for (std::size_t k = 0; k < uu; ++k) next[k] = z[k] * h[k] + (1 - z[k]) * std::tanh(candidate[k]);
      h = next;
      out.put(b, t, h);
    }
  }
  return out.y;
}

shape x_dims_of(const sequence_geometry& g) { return {g.batch, g.steps, g.features}; }

}  // namespace

TEST_CASE("lstm declares Keras' kernels and a bias whose forget gate starts at one", "[layers][recurrent]") {
  nn::recurrent_options o;
  o.name = "lstm_layout";
  auto b = build(nn::lstm(3, o), {5, 2});
  CHECK(b.layer->kind() == "LSTM");
  CHECK(b.output.dims == shape{3});
  const auto& w = b.layer->weights();
  REQUIRE(w.size() == 3);
  CHECK(w[0].name == "lstm_layout/kernel");
  CHECK(w[0].spec.dims == shape{2, 12});
  CHECK(w[1].name == "lstm_layout/recurrent_kernel");
  CHECK(w[1].spec.dims == shape{3, 12});
  CHECK(w[2].name == "lstm_layout/bias");
  CHECK(w[2].spec.dims == shape{12});
  CHECK(b.weights[2] == values{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0});

  o.name.clear();
  o.unit_forget_bias = false;
  o.return_sequences = true;
  auto plain = build(nn::lstm(3, o), {5, 2});
  CHECK(plain.output.dims == shape{5, 3});
  CHECK(plain.weights[2] == values(12, 0.0));
}

TEST_CASE("lstm matches a step-by-step loop, for the last step and the whole sequence", "[layers][recurrent]") {
  const sequence_geometry g{.batch = 2, .steps = 4, .features = 3, .units = 3};
  for (bool return_sequences : {false, true})
    for (bool use_bias : {true, false}) {
      INFO("return_sequences " << return_sequences << ", use_bias " << use_bias);
      nn::recurrent_options o;
      o.return_sequences = return_sequences;
      o.use_bias = use_bias;
      auto b = build(nn::lstm(g.units, o), {g.steps, g.features});
      auto w = b.weights;
      if (use_bias) w[2] = sample_values(w[2].size(), 61, -0.5, 0.5);
      const values x = sample_values(static_cast<std::size_t>(g.batch * g.steps * g.features), 62);
      const reference ref = [&](const values& xv, const std::vector<values>& ws) {
        return lstm_reference(g, return_sequences, xv, ws);
      };
      auto r = run_ok(b, make_tensor(x, x_dims_of(g), dtype::f64), w, /*training=*/true);
      CHECK(r.y.shape() == (return_sequences ? shape{g.batch, g.steps, g.units} : shape{g.batch, g.units}));
      check_values(r.y.to_vector<double>(), ref(x, w), 1e-12, "output");
      check_gradients(ref, x, w, r, b, 1e-7);
    }
}

TEST_CASE("gru matches a step-by-step loop with the reset gate after and before the matmul", "[layers][recurrent]") {
  const sequence_geometry g{.batch = 2, .steps = 3, .features = 2, .units = 3};
  for (bool reset_after : {true, false})
    for (bool return_sequences : {false, true})
      for (bool use_bias : {true, false}) {
        INFO("reset_after " << reset_after << ", return_sequences " << return_sequences << ", use_bias " << use_bias);
        nn::recurrent_options o;
        o.reset_after = reset_after;
        o.return_sequences = return_sequences;
        o.use_bias = use_bias;
        o.name = std::string{"gru_case_"} + std::to_string(reset_after) + std::to_string(return_sequences) +
                 std::to_string(use_bias);
        auto b = build(nn::gru(g.units, o), {g.steps, g.features});
        CHECK(b.layer->kind() == "GRU");
        const auto& spec = b.layer->weights();
        REQUIRE(spec.size() == (use_bias ? 3u : 2u));
        CHECK(spec[0].spec.dims == shape{g.features, 3 * g.units});
        CHECK(spec[1].spec.dims == shape{g.units, 3 * g.units});
        if (use_bias) CHECK(spec[2].spec.dims == (reset_after ? shape{2, 3 * g.units} : shape{3 * g.units}));
        auto w = b.weights;
        if (use_bias) w[2] = sample_values(w[2].size(), 71, -0.5, 0.5);
        const values x = sample_values(static_cast<std::size_t>(g.batch * g.steps * g.features), 72);
        const reference ref = [&](const values& xv, const std::vector<values>& ws) {
          return gru_reference(g, return_sequences, reset_after, xv, ws);
        };
        auto r = run_ok(b, make_tensor(x, x_dims_of(g), dtype::f64), w, /*training=*/false);
        check_values(r.y.to_vector<double>(), ref(x, w), 1e-12, "output");
        check_gradients(ref, x, w, r, b, 1e-7);
      }
}

TEST_CASE("lstm and gru in f32 agree with the double run", "[layers][recurrent]") {
  const sequence_geometry g{.batch = 3, .steps = 5, .features = 4, .units = 2};
  const values x = sample_values(static_cast<std::size_t>(g.batch * g.steps * g.features), 81);
  const tensor xt = make_tensor(x, x_dims_of(g), dtype::f32);
  for (auto make : {+[] { return nn::lstm(2, {.return_sequences = true}); }, +[] { return nn::gru(2); }}) {
    auto b = build(make(), {g.steps, g.features});
    auto r32 = run_ok(b, xt, b.weights, true, dtype::f32);
    auto r64 = run_ok(b, xt, b.weights, true, dtype::f64);
    INFO(b.layer->name());
    CHECK(r32.y.type() == dtype::f32);
    check_values(r32.y.to_vector<double>(), r64.y.to_vector<double>(), 1e-5, "f32 output");
    check_values(r32.grad_x, r64.grad_x, 1e-4, "f32 d/dx");
    check_values(r32.grad_w[1], r64.grad_w[1], 1e-4, "f32 d/d recurrent_kernel");
  }
}

TEST_CASE("embedding looks up rows and scatters its gradient into the rows it used", "[layers][recurrent]") {
  for (dtype ids_type : {dtype::i32, dtype::i64}) {
    INFO("ids " << to_string(ids_type));
    nn::embedding_options o;
    o.name = ids_type == dtype::i32 ? "emb32" : "emb64";
    auto b = build(nn::embedding(5, 3, o), {4}, ids_type);
    CHECK(b.layer->kind() == "Embedding");
    CHECK(b.output.dims == shape{4, 3});
    REQUIRE(b.layer->weights().size() == 1);
    CHECK(b.layer->weights()[0].name == o.name + "/embeddings");
    CHECK(b.layer->weights()[0].spec.dims == shape{5, 3});
    for (double v : b.weights[0]) CHECK(std::fabs(v) <= 0.05);  // Keras' uniform(-0.05, 0.05)

    const values ids = {1, 3, 1, 0, 4, 1, 3, 3};  // [2, 4]: row 2 unused, 1 and 3 repeated
    const std::vector<values> w = {sample_values(15, 91)};
    const reference ref = [&](const values&, const std::vector<values>& ws) {
      values y;
      for (double id : ids)
        for (std::size_t j = 0; j < 3; ++j) y.push_back(ws[0][static_cast<std::size_t>(id) * 3 + j]);
      return y;
    };
    auto r = run_ok(b, make_tensor(ids, {2, 4}, ids_type), w, /*training=*/true);
    CHECK(r.y.shape() == shape{2, 4, 3});
    CHECK(r.grad_x.empty());
    check_values(r.y.to_vector<double>(), ref(ids, w), 0, "output");
    check_gradients(ref, ids, w, r, b, 1e-8);
    // By hand: row k gets the probe of every position that picked it.
    values want(15, 0.0);
    for (std::size_t pos = 0; pos < ids.size(); ++pos)
      for (std::size_t j = 0; j < 3; ++j) want[static_cast<std::size_t>(ids[pos]) * 3 + j] += probe(pos * 3 + j);
    check_values(r.grad_w[0], want, 1e-12, "d/d embeddings");
    for (std::size_t j = 0; j < 3; ++j) CHECK(r.grad_w[0][2 * 3 + j] == 0.0);
  }
}

TEST_CASE("embedding fails the step on an id outside its table, naming the id", "[layers][recurrent]") {
  auto b = build(nn::embedding(5, 2), {3}, dtype::i64);
  for (double bad : {5.0, -1.0, 17.0}) {
    auto r = run(b, make_tensor({0, bad, 1}, {1, 3}, dtype::i64), b.weights, /*training=*/false);
    REQUIRE_FALSE(r);
    INFO(r.error_value().to_string());
    CHECK(r.error_value().code == errc::out_of_range);
    CHECK(r.error_value().message.find(std::to_string(static_cast<int64_t>(bad))) != std::string::npos);
  }
}

TEST_CASE("recurrent layers and embedding reject inputs that do not fit, naming the layer", "[layers][recurrent]") {
  auto e = apply_error(nn::lstm(4, {.name = "lstm_bad"}), {10});
  CHECK(e.code == errc::shape_mismatch);
  CHECK(e.message.find("LSTM 'lstm_bad'") != std::string::npos);
  CHECK(e.message.find("rank 2") != std::string::npos);
  e = apply_error(nn::lstm(4, {.name = "lstm_bad"}), {10, 3}, dtype::i32);
  CHECK(e.code == errc::dtype_mismatch);
  CHECK(e.message.find("LSTM 'lstm_bad'") != std::string::npos);
  e = apply_error(nn::gru(4, {.name = "gru_bad"}), {10, 3, 2});
  CHECK(e.code == errc::shape_mismatch);
  CHECK(e.message.find("GRU 'gru_bad'") != std::string::npos);
  e = apply_error(nn::gru(0, {.name = "gru_bad"}), {10, 3});
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message.find("units") != std::string::npos);
  e = apply_error(nn::gru(2, {.recurrent_activation = "hard_sigmoid", .name = "gru_bad"}), {10, 3});
  CHECK(e.code == errc::invalid_argument);
  CHECK(e.message.find("hard_sigmoid") != std::string::npos);
  e = apply_error(nn::embedding(10, 4, {.name = "emb_bad"}), {6}, dtype::f32);
  CHECK(e.code == errc::dtype_mismatch);
  CHECK(e.message.find("Embedding 'emb_bad'") != std::string::npos);
}
