// Embedding, LSTM and GRU. The recurrent layers unroll their time loop into the traced graph: the
// input projection of every step is one matmul, then each step adds its recurrent matmul. The
// state starts at zero, so the first step skips the recurrent matmul altogether.

#include <optional>
#include <string>

#include "ops/train/layers.hpp"

namespace af::nn {

namespace {

/// Entries [part * units, (part + 1) * units) of the last axis of a [B, k * units] (or [k * units])
/// value: one gate.
sym gate(const sym& z, int64_t part, int64_t units) {
  const auto last = static_cast<int64_t>(z.dims().size()) - 1;
  return af::slice(z, last, part * units, (part + 1) * units);
}

/// x [B, T, F] @ kernel [F, k] (+ bias [k]) as one matmul: [B, T, k].
sym project_all_steps(const sym& x, const sym& kernel, const std::optional<sym>& bias) {
  const auto d = x.dims();
  const int64_t k = kernel.dims()[1];
  sym z = af::matmul(af::reshape(x, {-1, d[2]}), kernel);  // -1: the batch may be unknown (a saved signature)
  if (bias) z = z + *bias;
  return af::reshape(z, {d[0], d[1], k});
}

/// Step t of a [B, T, k] value: [B, k].
sym step_of(const sym& z, int64_t t) {
  const auto d = z.dims();
  return af::reshape(af::slice(z, 1, t, t + 1), {d[0], d[2]});
}

/// The checks LSTM and GRU make; `fail` names the layer.
template <class Fail>
expected<void> check_recurrent_input(const std::vector<value_spec>& in, int64_t units, const recurrent_options& o,
                                     const Fail& fail) {
  if (in.size() != 1) return fail(errc::invalid_argument, "takes one input, got " + std::to_string(in.size()));
  if (in[0].dims.size() != 2)
    return fail(errc::shape_mismatch, "needs [timesteps, features] per sample (rank 2), got " + to_string(in[0].dims));
  if (in[0].type != dtype::f32) return fail(errc::dtype_mismatch, "needs f32 input");
  if (in[0].dims[0] <= 0) return fail(errc::shape_mismatch, "needs at least one timestep, got " + to_string(in[0].dims));
  if (units <= 0) return fail(errc::invalid_argument, "units must be positive, got " + std::to_string(units));
  if (!known_activation(o.activation)) return fail(errc::invalid_argument, "unknown activation '" + o.activation + "'");
  if (!known_activation(o.recurrent_activation))
    return fail(errc::invalid_argument, "unknown recurrent_activation '" + o.recurrent_activation + "'");
  return {};
}

value_spec recurrent_output(const value_spec& in, int64_t units, bool return_sequences) {
  return return_sequences ? value_spec{dtype::f32, shape{in.dims[0], units}} : value_spec{dtype::f32, shape{units}};
}

// -- embedding -----------------------------------------------------------------------------------

class embedding_layer final : public layer {
 public:
  embedding_layer(int64_t input_dim, int64_t output_dim, embedding_options o)
      : layer("Embedding", layer_name{"embedding", o.name}), input_dim_(input_dim), output_dim_(output_dim),
        options_(std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    if (in.size() != 1) return fail(errc::invalid_argument, "takes one input, got " + std::to_string(in.size()));
    if (in[0].type != dtype::i32 && in[0].type != dtype::i64)
      return fail(errc::dtype_mismatch, "needs integer ids (i32 or i64), got " + graph::to_string(in[0]));
    if (input_dim_ <= 0 || output_dim_ <= 0)
      return fail(errc::invalid_argument, std::string{"input_dim and output_dim must be positive, got "} +
                                              std::to_string(input_dim_) + " and " + std::to_string(output_dim_));
    AF_TRY_ASSIGN(auto init, initializer_named(options_.embeddings_initializer));
    add_weight("embeddings", {input_dim_, output_dim_}, init);
    value_spec out{dtype::f32, in[0].dims};
    out.dims.push_back(output_dim_);
    return std::vector<value_spec>{out};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    // gather checks every id at run time: one outside [0, input_dim) fails the step, naming it.
    return {af::gather(ctx.weight(0), in[0])};
  }

 private:
  int64_t input_dim_, output_dim_;
  embedding_options options_;
};

// -- LSTM and GRU ----------------------------------------------------------------------------------

/// What LSTM and GRU share: the input check and the kernel [features, gates*units] and recurrent
/// kernel [units, gates*units] (weights 0 and 1).
class recurrent_layer : public layer {
 public:
  recurrent_layer(std::string kind, const std::string& base, int64_t units, recurrent_options o)
      : layer(std::move(kind), layer_name{base, o.name}), units_(units), options_(std::move(o)) {}

 protected:
  expected<void> add_kernels(const std::vector<value_spec>& in, int64_t gates) {
    AF_TRY(check_recurrent_input(in, units_, options_, [this](errc c, const std::string& w) { return fail(c, w); }));
    AF_TRY_ASSIGN(auto kernel_init, initializer_named(options_.kernel_initializer));
    AF_TRY_ASSIGN(auto recurrent_init, initializer_named(options_.recurrent_initializer));
    add_weight("kernel", {in[0].dims[1], gates * units_}, kernel_init);
    add_weight("recurrent_kernel", {units_, gates * units_}, recurrent_init);
    return {};
  }

  int64_t units_;
  recurrent_options options_;
};

class lstm_layer final : public recurrent_layer {
 public:
  lstm_layer(int64_t units, recurrent_options o) : recurrent_layer("LSTM", "lstm", units, std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    AF_TRY(add_kernels(in, 4));
    if (options_.use_bias) {
      initializer bias_init = zeros_initializer();
      if (options_.unit_forget_bias)  // gates i, f, c, o: ones for f, zeros elsewhere
        bias_init = [units = units_](const shape& dims, uint64_t) -> expected<tensor> {
          std::vector<float> v(static_cast<std::size_t>(numel(dims)), 0.0f);
          for (int64_t j = units; j < 2 * units; ++j) v[static_cast<std::size_t>(j)] = 1.0f;
          return tensor::from_vector(v, dims);
        };
      add_weight("bias", {4 * units_}, bias_init);
    }
    return std::vector<value_spec>{recurrent_output(in[0], units_, options_.return_sequences)};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    const sym& recurrent_kernel = ctx.weight(1);
    std::optional<sym> bias;
    if (options_.use_bias) bias = ctx.weight(2);
    const sym xz = project_all_steps(in[0], ctx.weight(0), bias);
    const int64_t steps = in[0].dims()[1];
    const auto& act = options_.activation;
    const auto& rec = options_.recurrent_activation;
    std::optional<sym> h, c;
    std::vector<sym> outputs;
    for (int64_t t = 0; t < steps; ++t) {
      sym z = step_of(xz, t);
      if (h) z = z + af::matmul(*h, recurrent_kernel);
      const sym i = activate(rec, gate(z, 0, units_));
      const sym f = activate(rec, gate(z, 1, units_));
      const sym g = activate(act, gate(z, 2, units_));
      const sym o = activate(rec, gate(z, 3, units_));
      c = c ? f * *c + i * g : i * g;  // c0 = 0
      h = o * activate(act, *c);
      if (options_.return_sequences) outputs.push_back(*h);
    }
    if (options_.return_sequences) return {af::stack(outputs, 1)};
    return {*h};
  }
};

// -- GRU -------------------------------------------------------------------------------------------

class gru_layer final : public recurrent_layer {
 public:
  gru_layer(int64_t units, recurrent_options o) : recurrent_layer("GRU", "gru", units, std::move(o)) {}

  expected<std::vector<value_spec>> build(const std::vector<value_spec>& in) override {
    AF_TRY(add_kernels(in, 3));
    if (options_.use_bias) {
      if (options_.reset_after)
        add_weight("bias", {2, 3 * units_}, zeros_initializer());  // row 0: input bias, row 1: recurrent
      else
        add_weight("bias", {3 * units_}, zeros_initializer());
    }
    return std::vector<value_spec>{recurrent_output(in[0], units_, options_.return_sequences)};
  }

  std::vector<sym> call(const std::vector<sym>& in, call_context& ctx) const override {
    const int64_t u = units_;
    const sym& recurrent_kernel = ctx.weight(1);
    std::optional<sym> input_bias, recurrent_bias;
    if (options_.use_bias) {
      const sym& b = ctx.weight(2);
      if (options_.reset_after) {
        input_bias = af::reshape(af::slice(b, 0, 0, 1), {3 * u});
        recurrent_bias = af::reshape(af::slice(b, 0, 1, 2), {3 * u});
      } else {
        input_bias = b;
      }
    }
    const sym xz = project_all_steps(in[0], ctx.weight(0), input_bias);
    const int64_t steps = in[0].dims()[1];
    const auto& act = options_.activation;
    const auto& rec = options_.recurrent_activation;
    // reset_after=false multiplies r into h before the h-part of the recurrent kernel.
    const sym kernel_zr = af::slice(recurrent_kernel, 1, 0, 2 * u);
    const sym kernel_h = af::slice(recurrent_kernel, 1, 2 * u, 3 * u);
    std::optional<sym> h;
    std::vector<sym> outputs;
    for (int64_t t = 0; t < steps; ++t) {
      const sym x = step_of(xz, t);  // x W + b_input for z, r, h
      // The recurrent projection h U (+ b_recurrent); with h0 = 0 only the bias is left.
      std::optional<sym> hz;
      if (options_.reset_after) {
        if (h) hz = af::matmul(*h, recurrent_kernel);
        if (recurrent_bias) hz = hz ? *hz + *recurrent_bias : *recurrent_bias;
      } else if (h) {
        hz = af::matmul(*h, kernel_zr);
      }
      const auto with_recurrent = [&](int64_t part) { return hz ? gate(x, part, u) + gate(*hz, part, u) : gate(x, part, u); };
      const sym z = activate(rec, with_recurrent(0));
      const sym r = activate(rec, with_recurrent(1));
      sym candidate = gate(x, 2, u);
      if (options_.reset_after) {
        if (hz) candidate = candidate + r * gate(*hz, 2, u);
      } else if (h) {
        candidate = candidate + af::matmul(r * *h, kernel_h);
      }
      const sym hh = activate(act, candidate);
      h = h ? z * *h + (1.0 - z) * hh : (1.0 - z) * hh;  // h0 = 0
      if (options_.return_sequences) outputs.push_back(*h);
    }
    if (options_.return_sequences) return {af::stack(outputs, 1)};
    return {*h};
  }
};

}  // namespace

layer_ptr embedding(int64_t input_dim, int64_t output_dim, embedding_options options) {
  return std::make_shared<embedding_layer>(input_dim, output_dim, std::move(options));
}

layer_ptr lstm(int64_t units, recurrent_options options) { return std::make_shared<lstm_layer>(units, std::move(options)); }

layer_ptr gru(int64_t units, recurrent_options options) { return std::make_shared<gru_layer>(units, std::move(options)); }

}  // namespace af::nn
