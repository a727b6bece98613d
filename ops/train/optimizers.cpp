#include "ops/train/optimizers.hpp"

namespace af::optimizers {

namespace {

[[noreturn]] void fail(const std::string& who, const std::string& why, const where_from& from) {
  fail_trace(errc::invalid_argument, who + ": " + why, from);
}

bool same_dims(const shape& a, const shape& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return false;
  return true;
}

sym squared_norm(const sym& x) { return reduce_sum(x * x); }

// Keras' clipvalue, then clipnorm, then global_clipnorm.
std::vector<sym> clipped(std::vector<sym> g, const clipping& clip) {
  if (clip.value > 0)
    for (auto& x : g) x = minimum(maximum(x, constant_like(x, -clip.value)), constant_like(x, clip.value));
  if (clip.norm > 0)
    for (auto& x : g) x = x * (clip.norm / maximum(sqrt(squared_norm(x)), constant_like(x, clip.norm)));
  if (clip.global_norm > 0 && !g.empty()) {
    sym total = squared_norm(g.front());
    for (std::size_t i = 1; i < g.size(); ++i) total = total + cast(squared_norm(g[i]), total.dtype_of());
    const sym scale = clip.global_norm / maximum(sqrt(total), constant_like(total, clip.global_norm));
    for (auto& x : g) x = x * cast(scale, x.dtype_of());
  }
  return g;
}

// beta^t for the update count t as a traced scalar.
sym power(double beta, const sym& t) { return pow(constant_like(t, beta), t); }

}  // namespace

optimizer optimizer::sgd(sgd_options options) {
  optimizer o;
  o.kind_ = kind::sgd;
  o.name_ = options.nesterov ? "sgd (nesterov)" : "sgd";
  o.learning_rate_ = options.learning_rate;
  o.slots_per_variable_ = options.momentum != 0 ? 1 : 0;
  o.clip_ = options.clip;
  o.sgd_ = options;
  return o;
}

optimizer optimizer::adam(adam_options options) {
  optimizer o;
  o.kind_ = kind::adam;
  o.name_ = options.weight_decay > 0 ? "adamw" : "adam";
  o.learning_rate_ = options.learning_rate;
  o.slots_per_variable_ = 2;
  o.clip_ = options.clip;
  o.adam_ = options;
  return o;
}

optimizer optimizer::adamw(adam_options options) { return adam(options); }

optimizer optimizer::lamb(lamb_options options) {
  optimizer o;
  o.kind_ = kind::lamb;
  o.name_ = "lamb";
  o.learning_rate_ = options.learning_rate;
  o.slots_per_variable_ = 2;
  o.clip_ = options.clip;
  o.lamb_ = options;
  return o;
}

expected<std::vector<tensor>> optimizer::initial_slots(const std::vector<tensor>& variables) const {
  std::vector<tensor> slots;
  for (std::size_t s = 0; s < slots_per_variable_; ++s)
    for (const auto& v : variables) {
      AF_TRY_ASSIGN(auto zero, tensor::zeros(v.shape(), v.type()));
      slots.push_back(std::move(zero));
    }
  return slots;
}

optimizer::update optimizer::apply(const std::vector<sym>& variables, const std::vector<sym>& gradients,
                                   const std::vector<sym>& slots, const sym& learning_rate, const sym& updates_done,
                                   where_from from) const {
  const std::size_t n = variables.size();
  if (gradients.size() != n)
    fail(name_, std::to_string(gradients.size()) + " gradients for " + std::to_string(n) + " variables", from);
  if (slots.size() != slots_per_variable_ * n)
    fail(name_, std::to_string(slots.size()) + " slots for " + std::to_string(n) + " variables (" +
                    std::to_string(slots_per_variable_) + " each)",
         from);
  if (!learning_rate.dims().empty() || !updates_done.dims().empty())
    fail(name_, "the learning rate and the update count must be scalars, got " + graph::to_string(learning_rate.type()) +
                    " and " + graph::to_string(updates_done.type()),
         from);
  for (std::size_t i = 0; i < n; ++i) {
    if (!is_floating(variables[i].dtype_of()))
      fail(name_, "variable " + std::to_string(i) + " " + graph::to_string(variables[i].type()) + " is not floating", from);
    if (gradients[i].dtype_of() != variables[i].dtype_of() || !same_dims(gradients[i].dims(), variables[i].dims()))
      fail(name_, "gradient " + std::to_string(i) + " " + graph::to_string(gradients[i].type()) + " does not fit variable " +
                      graph::to_string(variables[i].type()),
           from);
    for (std::size_t s = 0; s < slots_per_variable_; ++s) {
      const sym& slot = slots[s * n + i];
      if (slot.dtype_of() != variables[i].dtype_of() || !same_dims(slot.dims(), variables[i].dims()))
        fail(name_, "slot " + std::to_string(s) + " of variable " + std::to_string(i) + " " + graph::to_string(slot.type()) +
                        " does not fit " + graph::to_string(variables[i].type()),
             from);
    }
  }
  const auto g = clipped(gradients, clip_);
  update out;
  out.slots = slots;
  for (std::size_t i = 0; i < n; ++i) {
    const sym& w = variables[i];
    const sym lr = cast(learning_rate, w.dtype_of());
    const sym t = cast(updates_done, w.dtype_of()) + 1.0;  // this update's number, from 1
    switch (kind_) {
      case kind::sgd: {
        if (slots_per_variable_ == 0) {
          out.variables.push_back(w - lr * g[i]);
          break;
        }
        const sym m = slots[i] * sgd_.momentum - lr * g[i];
        out.slots[i] = m;
        out.variables.push_back(sgd_.nesterov ? w + m * sgd_.momentum - lr * g[i] : w + m);
        break;
      }
      case kind::adam: {
        const auto& o = adam_;
        const sym decayed = o.weight_decay > 0 ? w - w * o.weight_decay * lr : w;
        const sym m = slots[i] + (g[i] - slots[i]) * (1.0 - o.beta_1);
        const sym v = slots[n + i] + (g[i] * g[i] - slots[n + i]) * (1.0 - o.beta_2);
        const sym alpha = lr * sqrt(1.0 - power(o.beta_2, t)) / (1.0 - power(o.beta_1, t));
        out.slots[i] = m;
        out.slots[n + i] = v;
        out.variables.push_back(decayed - m * alpha / (sqrt(v) + o.epsilon));
        break;
      }
      case kind::lamb: {
        const auto& o = lamb_;
        const sym m = slots[i] * o.beta_1 + g[i] * (1.0 - o.beta_1);
        const sym v = slots[n + i] * o.beta_2 + g[i] * g[i] * (1.0 - o.beta_2);
        const sym m_hat = m / (1.0 - power(o.beta_1, t));
        const sym v_hat = v / (1.0 - power(o.beta_2, t));
        const sym r = m_hat / (sqrt(v_hat) + o.epsilon) + w * o.weight_decay;
        const sym w_norm = sqrt(squared_norm(w)), r_norm = sqrt(squared_norm(r));
        const sym zero = constant_like(w_norm, 0.0), one = constant_like(w_norm, 1.0);
        // ||w|| / ||r||, or 1 when either is zero (a fresh zero variable, a zero direction).
        const sym trust = where(greater(w_norm, zero), where(greater(r_norm, zero), w_norm / r_norm, one), one);
        out.slots[i] = m;
        out.slots[n + i] = v;
        out.variables.push_back(w - lr * trust * r);
        break;
      }
    }
  }
  return out;
}

}  // namespace af::optimizers
