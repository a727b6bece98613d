// Binary elementwise arithmetic: out[i] = f(a[i], b[i]) with NumPy broadcasting, no implicit
// promotion. Each op's scalar formula is written once, as a functor over the compute type; its eager
// CPU kernel, its fused CPU loops and the eager af:: functions come from it, and its CUDA expression
// and gradient sit beside it. Integers wrap on overflow; see ops/elementwise.hpp for the rules.

#include <cmath>
#include <type_traits>

#include "ops/elementwise.hpp"
#include "ops/graph/defs/families.hpp"
#include "ops/kernels/cpu/elementwise_apply.hpp"
#include "ops/kernels/cpu/scalar_math.hpp"

namespace af {

namespace {

template <class C>
C int_pow(C base, C exponent) {
  if constexpr (std::is_signed_v<C>) {
    if (exponent < 0) {  // truncated 1 / base^-exponent; 1/0 is defined as 0 like integer division
      if (base == 1) return 1;
      if (base == -1) return (exponent & 1) ? C(-1) : C(1);
      return 0;
    }
  }
  C result = 1;
  for (;;) {
    if (exponent & 1) result = cpu::wrap_mul(result, base);
    exponent = static_cast<C>(exponent / 2);
    if (exponent == 0) return result;
    base = cpu::wrap_mul(base, base);
  }
}

// -- formulas ---------------------------------------------------------------------------------------

struct add_formula {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return cpu::wrap_add(x, y);
    else return x + y;
  }
};
struct sub_formula {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return cpu::wrap_sub(x, y);
    else return x - y;
  }
};
struct mul_formula {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return cpu::wrap_mul(x, y);
    else return x * y;
  }
};
struct div_formula {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<C>)
        if (y == -1) return cpu::wrap_sub(C(0), x);  // INT_MIN / -1 would trap
      return static_cast<C>(x / y);
    } else {
      return x / y;
    }
  }
};
struct pow_formula {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return int_pow(x, y);
    else return std::pow(x, y);
  }
};
struct maximum_formula {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return x > y ? x : y;
    else return (x > y || x != x) ? x : y;  // NaN in either propagates
  }
};
struct minimum_formula {
  template <class C> C operator()(C x, C y) const {
    if constexpr (std::is_integral_v<C>) return x < y ? x : y;
    else return (x < y || x != x) ? x : y;
  }
};

// -- definitions ------------------------------------------------------------------------------------

using cpu::binary_operands;
using graph::gradient_emitter;
using graph::input_gradients;
using graph::node;
using graph::node_id;
using graph::op_def;
using graph::value_type;

template <class F>
op_def binary_def(std::string name, std::string cuda, graph::affine_role affine, graph::gradient_rule gradient) {
  op_def d = graph::defs::basic_def(name, graph::op_category::elementwise_binary, 2);
  d.infer = [name](const std::vector<value_type>& in, const op_attrs&) -> expected<value_type> {
    if (in[0].type != in[1].type)
      return graph::defs::mismatch(errc::dtype_mismatch, name, in, "dtypes differ (no implicit promotion)");
    if (in[0].type == dtype::boolean) return graph::defs::mismatch(errc::dtype_mismatch, name, in, "bool is not numeric");
    auto joined = graph::defs::broadcast_known(in[0].dims, in[1].dims);
    if (!joined) return graph::defs::mismatch(errc::shape_mismatch, name, in, joined.error_value().message);
    return value_type{in[0].type, std::move(*joined)};
  };
  d.cpu_kernel = [name](const std::vector<tensor>& in, const op_attrs&) -> expected<std::vector<tensor>> {
    return graph::defs::one(cpu::apply_binary<void, F, binary_operands::numeric>(name.c_str(), in[0], in[1]));
  };
  d.fusion = [cuda, affine](const op_attrs&) -> expected<graph::fused_form> {
    return graph::fused_form{cpu::binary_step_loops<F>(), cuda, affine};
  };
  d.gradient = graph::differentiable(std::move(gradient));
  return d;
}

// Each rule is d out / d in times g, then summed back over the dimensions broadcasting added.
input_gradients both(gradient_emitter& e, const node& n, node_id ga, node_id gb) {
  return {e.unbroadcast(ga, e.dims(n.inputs[0])), e.unbroadcast(gb, e.dims(n.inputs[1]))};
}

}  // namespace

namespace graph::defs {

void define_elementwise_binary(std::vector<op_def>& out) {
  out.push_back(binary_def<add_formula>("add", "{0} + {1}", affine_role::add,
                                        [](gradient_emitter& e, const node& n, node_id, node_id g) {
                                          return both(e, n, g, g);
                                        }));
  out.push_back(binary_def<sub_formula>("sub", "{0} - {1}", affine_role::sub,
                                        [](gradient_emitter& e, const node& n, node_id, node_id g) {
                                          return both(e, n, g, e.neg(g));
                                        }));
  out.push_back(binary_def<mul_formula>("mul", "{0} * {1}", affine_role::mul,
                                        [](gradient_emitter& e, const node& n, node_id, node_id g) {
                                          return both(e, n, e.mul(g, n.inputs[1]), e.mul(g, n.inputs[0]));
                                        }));
  out.push_back(binary_def<div_formula>("div", "{0} / {1}", affine_role::none,
                                        [](gradient_emitter& e, const node& n, node_id self, node_id g) {
                                          // a/b: g/b, -g a / b^2 = -(g/b) (a/b)
                                          const node_id ga = e.div(g, n.inputs[1]);
                                          return both(e, n, ga, e.neg(e.mul(ga, self)));
                                        }));
  out.push_back(binary_def<pow_formula>(
      "pow", "pow{f}({0}, {1})", affine_role::none, [](gradient_emitter& e, const node& n, node_id self, node_id g) {
        // a^b: g b a^(b-1), and g a^b log(a)
        const auto& in = n.inputs;
        const node_id ga = e.mul(g, e.mul(in[1], e.op("pow", {in[0], e.sub(in[1], e.scalar(1, n.out.type))})));
        const node_id gb = e.mul(g, e.mul(self, e.op("log", {in[0]})));
        return both(e, n, ga, gb);
      }));
  // The winner takes g (the first operand on ties).
  auto extremum_rule = [](const char* first_wins_op) {
    return [first_wins_op](gradient_emitter& e, const node& n, node_id, node_id g) {
      const node_id first_wins = e.op(first_wins_op, {n.inputs[0], n.inputs[1]});
      const node_id zero = e.scalar(0, n.out.type);
      return both(e, n, e.where(first_wins, g, zero), e.where(first_wins, zero, g));
    };
  };
  out.push_back(binary_def<maximum_formula>("maximum", "(({0} > {1} || {0} != {0}) ? {0} : {1})", affine_role::none,
                                            extremum_rule("greater_equal")));
  out.push_back(binary_def<minimum_formula>("minimum", "(({0} < {1} || {0} != {0}) ? {0} : {1})", affine_role::none,
                                            extremum_rule("less_equal")));
}

}  // namespace graph::defs

// -- the eager functions (ops/elementwise.hpp) -----------------------------------------------------

expected<tensor> add(const tensor& a, const tensor& b) {
  return cpu::apply_binary<void, add_formula, binary_operands::numeric>("add", a, b);
}
expected<tensor> sub(const tensor& a, const tensor& b) {
  return cpu::apply_binary<void, sub_formula, binary_operands::numeric>("sub", a, b);
}
expected<tensor> mul(const tensor& a, const tensor& b) {
  return cpu::apply_binary<void, mul_formula, binary_operands::numeric>("mul", a, b);
}
expected<tensor> div(const tensor& a, const tensor& b) {
  return cpu::apply_binary<void, div_formula, binary_operands::numeric>("div", a, b);
}
expected<tensor> pow(const tensor& a, const tensor& b) {
  return cpu::apply_binary<void, pow_formula, binary_operands::numeric>("pow", a, b);
}
expected<tensor> maximum(const tensor& a, const tensor& b) {
  return cpu::apply_binary<void, maximum_formula, binary_operands::numeric>("maximum", a, b);
}
expected<tensor> minimum(const tensor& a, const tensor& b) {
  return cpu::apply_binary<void, minimum_formula, binary_operands::numeric>("minimum", a, b);
}

// Tensor op scalar: the scalar becomes a 0-d tensor of a's dtype (float for an undefined a, which
// then fails the op).
#define AF_SCALAR_OVERLOAD(name)                                     \
  expected<tensor> name(const tensor& a, double b) {                 \
    AF_TRY_ASSIGN(tensor s, tensor::full({}, b, a.type()));          \
    return name(a, s);                                               \
  }
AF_SCALAR_OVERLOAD(add)
AF_SCALAR_OVERLOAD(sub)
AF_SCALAR_OVERLOAD(mul)
AF_SCALAR_OVERLOAD(div)
AF_SCALAR_OVERLOAD(pow)
AF_SCALAR_OVERLOAD(maximum)
AF_SCALAR_OVERLOAD(minimum)
#undef AF_SCALAR_OVERLOAD

}  // namespace af
