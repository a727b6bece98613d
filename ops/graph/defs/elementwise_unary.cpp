// Unary elementwise ops: out[i] = f(x[i]). Each op's scalar formula is written once, as a functor
// over the compute type; its eager CPU kernel, its fused CPU loops (baseline and AVX-512) and the
// eager af:: functions are instantiated from it, and its CUDA expression and gradient sit beside it.
// Compiled with -fno-math-errno -fno-trapping-math (ops/CMakeLists.txt) so the loops vectorise.

#include <cmath>
#include <type_traits>

#include "ops/elementwise.hpp"
#include "ops/graph/defs/families.hpp"
#include "ops/kernels/cpu/elementwise_apply.hpp"
#include "ops/kernels/cpu/scalar_math.hpp"

namespace af {

namespace {

using cpu::unary_domain;

// -- formulas ---------------------------------------------------------------------------------------

struct neg_formula {
  template <class C> C operator()(C x) const {
    if constexpr (std::is_integral_v<C>) return cpu::wrap_neg(x);
    else return -x;
  }
};
struct abs_formula {
  template <class C> C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;
    else if constexpr (std::is_integral_v<C>) return x < 0 ? cpu::wrap_neg(x) : x;
    else return std::fabs(x);
  }
};
struct relu_formula {
  template <class C> C operator()(C x) const { return x < C(0) ? C(0) : x; }  // keeps NaN
};
struct exp_formula {
  template <class C> C operator()(C x) const { return cpu::exp_of(x); }
};
struct log_formula {
  template <class C> C operator()(C x) const { return std::log(x); }
};
struct sqrt_formula {
  template <class C> C operator()(C x) const { return std::sqrt(x); }
};
struct rsqrt_formula {
  template <class C> C operator()(C x) const { return C(1) / std::sqrt(x); }
};
struct tanh_formula {
  template <class C> C operator()(C x) const { return cpu::tanh_of(x); }
};
struct erf_formula {
  template <class C> C operator()(C x) const { return cpu::erf_of(x); }
};
struct sigmoid_formula {
  template <class C> C operator()(C x) const {
    // e^-|x| never overflows, so both halves stay finite for any x.
    const C e = cpu::exp_of(x >= C(0) ? -x : x);
    return x >= C(0) ? C(1) / (C(1) + e) : e / (C(1) + e);
  }
};
struct softplus_formula {  // log(1 + e^x) without overflow
  template <class C> C operator()(C x) const { return (x > C(0) ? x : C(0)) + std::log1p(cpu::exp_of(-std::fabs(x))); }
};
struct gelu_erf_formula {
  template <class C> C operator()(C x) const {
    return C(0.5) * x * (C(1) + cpu::erf_of(x * C(0.70710678118654752440)));
  }
};
struct gelu_tanh_formula {
  template <class C> C operator()(C x) const {
    const C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);  // sqrt(2/pi)
    return C(0.5) * x * (C(1) + cpu::tanh_of(inner));
  }
};

// -- definitions ------------------------------------------------------------------------------------

using graph::gradient_emitter;
using graph::node;
using graph::node_id;
using graph::op_def;
using graph::value_type;

// The common shape of a unary definition; `fusion` and `gradient` are the per-op parts.
template <class F, unary_domain Domain>
op_def unary_def(std::string name, std::string cuda, graph::gradient_spec gradient) {
  op_def d = graph::defs::basic_def(name, graph::op_category::elementwise_unary, 1);
  d.infer = [name](const std::vector<value_type>& in, const op_attrs&) -> expected<value_type> {
    if (Domain == unary_domain::floating && !is_floating(in[0].type))
      return graph::defs::mismatch(errc::dtype_mismatch, name, in, "needs a floating dtype");
    if (in[0].type == dtype::boolean) return graph::defs::mismatch(errc::dtype_mismatch, name, in, "bool is not numeric");
    return in[0];
  };
  d.cpu_kernel = [name](const std::vector<tensor>& in, const op_attrs&) -> expected<std::vector<tensor>> {
    return graph::defs::one(cpu::apply_unary<F, Domain>(name.c_str(), in[0]));
  };
  d.fusion = [cuda](const op_attrs&) -> expected<graph::fused_form> {
    return graph::fused_form{cpu::unary_step_loops<F>(), cuda, graph::affine_role::none};
  };
  d.gradient = std::move(gradient);
  return d;
}

graph::gradient_spec rule(graph::gradient_rule r) { return graph::differentiable(std::move(r)); }

}  // namespace

namespace graph::defs {

void define_elementwise_unary(std::vector<op_def>& out) {
  out.push_back(unary_def<neg_formula, unary_domain::numeric>(
      "neg", "-{0}", rule([](gradient_emitter& e, const node&, node_id, node_id g) -> input_gradients {
        return {e.neg(g)};
      })));
  out.push_back(unary_def<abs_formula, unary_domain::numeric>(
      "abs", "fabs{f}({0})", rule([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
        const dtype t = n.out.type;
        return {e.where(e.op("less", {n.inputs[0], e.scalar(0, t)}), e.neg(g), g)};
      })));
  // From the output (y > 0 exactly where x > 0): the input then often has no other use, and a bias
  // add before the ReLU fuses into its loop instead of being written out for the backward pass.
  out.push_back(unary_def<relu_formula, unary_domain::numeric>(
      "relu", "({0} < ({T})0 ? ({T})0 : {0})",
      rule([](gradient_emitter& e, const node& n, node_id self, node_id g) -> input_gradients {
        const dtype t = n.out.type;
        return {e.where(e.op("greater", {self, e.scalar(0, t)}), g, e.scalar(0, t))};
      })));
  out.push_back(unary_def<exp_formula, unary_domain::floating>(
      "exp", "exp{f}({0})", rule([](gradient_emitter& e, const node&, node_id self, node_id g) -> input_gradients {
        return {e.mul(g, self)};
      })));
  out.push_back(unary_def<log_formula, unary_domain::floating>(
      "log", "log{f}({0})", rule([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
        return {e.div(g, n.inputs[0])};
      })));
  out.push_back(unary_def<sqrt_formula, unary_domain::floating>(
      "sqrt", "sqrt{f}({0})", rule([](gradient_emitter& e, const node&, node_id self, node_id g) -> input_gradients {
        return {e.div(e.mul(g, 0.5), self)};
      })));
  out.push_back(unary_def<rsqrt_formula, unary_domain::floating>(  // d x^-1/2 = -x^-3/2 / 2
      "rsqrt", "rsqrt{f}({0})", rule([](gradient_emitter& e, const node& n, node_id self, node_id g) -> input_gradients {
        return {e.mul(e.mul(g, -0.5), e.div(self, n.inputs[0]))};
      })));
  out.push_back(unary_def<tanh_formula, unary_domain::floating>(
      "tanh", "tanh{f}({0})", rule([](gradient_emitter& e, const node& n, node_id self, node_id g) -> input_gradients {
        return {e.mul(g, e.sub(e.scalar(1, n.out.type), e.mul(self, self)))};
      })));
  out.push_back(unary_def<sigmoid_formula, unary_domain::floating>(
      "sigmoid", "(({T})1 / (({T})1 + exp{f}(-{0})))",
      rule([](gradient_emitter& e, const node& n, node_id self, node_id g) -> input_gradients {
        return {e.mul(g, e.mul(self, e.sub(e.scalar(1, n.out.type), self)))};
      })));
  out.push_back(unary_def<erf_formula, unary_domain::floating>(  // 2/sqrt(pi) e^(-x^2)
      "erf", "erf{f}({0})", rule([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
        const node_id x2 = e.mul(n.inputs[0], n.inputs[0]);
        return {e.mul(e.mul(g, 1.1283791670955126), e.op("exp", {e.neg(x2)}))};
      })));
  out.push_back(unary_def<softplus_formula, unary_domain::floating>(
      "softplus", "(fmax{f}({0}, ({T})0) + log1p{f}(exp{f}(-fabs{f}({0}))))",
      rule([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
        return {e.mul(g, e.op("sigmoid", {n.inputs[0]}))};
      })));

  // GELU: x Phi(x) with the exact erf form, or the tanh approximation (tf.nn.gelu's `approximate`).
  op_def gelu = unary_def<gelu_erf_formula, unary_domain::floating>("gelu", "", {});
  gelu.attrs = {integer_attr("approximate", 0)};
  // A flag: any other value is a damaged or foreign graph, not a third form.
  gelu.infer = [unary = gelu.infer](const std::vector<value_type>& in, const op_attrs& a) -> expected<value_type> {
    if (const int64_t approximate = int_attr(a, "approximate"); approximate != 0 && approximate != 1)
      return make_error(errc::invalid_argument, "gelu: attribute 'approximate' is a flag (0 or 1), not " + std::to_string(approximate));
    return unary(in, a);
  };
  gelu.cpu_kernel = [](const std::vector<tensor>& in, const op_attrs& a) -> expected<std::vector<tensor>> {
    return one(af::gelu(in[0], int_attr(a, "approximate") != 0));
  };
  gelu.fusion = [](const op_attrs& a) -> expected<fused_form> {
    if (int_attr(a, "approximate") != 0)
      return fused_form{cpu::unary_step_loops<gelu_tanh_formula>(),
                        "(({T})0.5 * {0} * (({T})1 + tanh{f}(({T})0.79788456080286535588 * ({0} + ({T})0.044715 * {0} * "
                        "{0} * {0}))))",
                        affine_role::none};
    return fused_form{cpu::unary_step_loops<gelu_erf_formula>(),
                      "(({T})0.5 * {0} * (({T})1 + erf{f}({0} * ({T})0.70710678118654752440)))", affine_role::none};
  };
  gelu.gradient = rule([](gradient_emitter& e, const node& n, node_id, node_id g) -> input_gradients {
    const dtype t = n.out.type;
    const node_id x = n.inputs[0];
    if (int_attr(n.attrs, "approximate") == 0) {  // Phi(x) + x phi(x)
      const node_id cdf = e.mul(e.add(e.scalar(1, t), e.op("erf", {e.mul(x, 0.70710678118654752440)})), 0.5);
      const node_id pdf = e.mul(e.op("exp", {e.mul(e.mul(x, x), -0.5)}), 0.39894228040143267794);
      return {e.mul(g, e.add(cdf, e.mul(x, pdf)))};
    }
    // u = c (x + k x^3), y = x (1 + tanh u) / 2: dy/dx = (1 + t)/2 + x (1 - t^2) c (1 + 3k x^2) / 2
    const double c = 0.79788456080286535588, k = 0.044715;
    const node_id x2 = e.mul(x, x);
    const node_id u = e.mul(e.add(x, e.mul(e.mul(x2, x), k)), c);
    const node_id th = e.op("tanh", {u});
    const node_id one = e.scalar(1, t);
    const node_id du = e.mul(e.add(one, e.mul(x2, 3 * k)), c);
    const node_id d = e.add(e.mul(e.add(one, th), 0.5), e.mul(e.mul(e.mul(x, e.sub(one, e.mul(th, th))), du), 0.5));
    return {e.mul(g, d)};
  });
  out.push_back(std::move(gelu));
}

}  // namespace graph::defs

// -- the eager functions (ops/elementwise.hpp) -----------------------------------------------------

expected<tensor> neg(const tensor& x) { return cpu::apply_unary<neg_formula, unary_domain::numeric>("neg", x); }
expected<tensor> abs(const tensor& x) { return cpu::apply_unary<abs_formula, unary_domain::numeric>("abs", x); }
expected<tensor> relu(const tensor& x) { return cpu::apply_unary<relu_formula, unary_domain::numeric>("relu", x); }
expected<tensor> exp(const tensor& x) { return cpu::apply_unary<exp_formula, unary_domain::floating>("exp", x); }
expected<tensor> log(const tensor& x) { return cpu::apply_unary<log_formula, unary_domain::floating>("log", x); }
expected<tensor> sqrt(const tensor& x) { return cpu::apply_unary<sqrt_formula, unary_domain::floating>("sqrt", x); }
expected<tensor> rsqrt(const tensor& x) { return cpu::apply_unary<rsqrt_formula, unary_domain::floating>("rsqrt", x); }
expected<tensor> tanh(const tensor& x) { return cpu::apply_unary<tanh_formula, unary_domain::floating>("tanh", x); }
expected<tensor> sigmoid(const tensor& x) {
  return cpu::apply_unary<sigmoid_formula, unary_domain::floating>("sigmoid", x);
}
expected<tensor> erf(const tensor& x) { return cpu::apply_unary<erf_formula, unary_domain::floating>("erf", x); }
expected<tensor> gelu(const tensor& x, bool approximate) {
  if (approximate) return cpu::apply_unary<gelu_tanh_formula, unary_domain::floating>("gelu", x);
  return cpu::apply_unary<gelu_erf_formula, unary_domain::floating>("gelu", x);
}

}  // namespace af
