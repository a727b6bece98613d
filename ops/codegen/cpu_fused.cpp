#include "ops/codegen/cpu_fused.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "ops/graph/op_def.hpp"
#include "ops/kernels/cpu/step_loops.hpp"
#include "ops/kernels/cpu/elementwise_loops.hpp"
#include "ops/parallel.hpp"

namespace af::codegen {

namespace {

using graph::fused_program;

using cpu::affine;
using graph::affine_role;
using graph::fused_form;

// What one step of the program runs, from its op's definition.
expected<fused_form> form_of(const graph::fused_step& s) {
  const graph::op_def* def = graph::find_op(s.op);
  if (!def || !def->fusion) return make_error(errc::unsupported, "fused kernels do not implement '" + s.op + "'");
  AF_TRY_ASSIGN(auto attrs, graph::complete_attrs(*def, s.attrs));
  return def->fusion(attrs);
}

expected<std::vector<fused_form>> forms_of(const fused_program& p) {
  std::vector<fused_form> forms;
  for (const auto& s : p.steps) {
    AF_TRY_ASSIGN(auto f, form_of(s));
    forms.push_back(std::move(f));
  }
  return forms;
}

const cpu::step_loops& identity_loops() {
  static const cpu::step_loops loops = cpu::unary_step_loops<cpu::identity_formula>();
  return loops;
}

// A step as it runs: value ids count the inputs first, then the planned steps.
template <class T>
struct planned_step {
  const cpu::step_loops* loops;
  int a = 0, b = -1;
  affine<T> pre, post;
};

// The program's steps with multiplies and adds by a single value folded into the loops of unary
// steps: gelu(x*a + b)*c runs as one loop computing gelu(x*a + b)*c per element instead of four
// loops through L1. Only forms whose arithmetic matches the unfused steps fold (x*s, x+s, x-s,
// s-x, and x*s followed by +-t, which the compiler may contract into one fma); anything else,
// or a value read twice, stays a step of its own.
template <class T>
std::vector<planned_step<T>> plan_steps(const fused_program& p, const std::vector<fused_form>& forms,
                                        const std::vector<bool>& is_single, const std::vector<T>& single) {
  const std::size_t n_in = p.inputs.size(), n_steps = p.steps.size();
  std::vector<int> uses(n_in + n_steps, 0);
  for (const auto& st : p.steps)
    for (int a : st.args) ++uses[static_cast<std::size_t>(a)];
  ++uses[n_in + n_steps - 1];  // the output
  std::vector<planned_step<T>> plan;
  // Per original value: the planned value holding it, or a pending affine of another value.
  struct pending {
    int base = -1;
    affine<T> map;
  };
  std::vector<int> planned_as(n_in + n_steps, -1);
  std::vector<std::optional<pending>> lazy(n_in + n_steps);
  for (std::size_t i = 0; i < n_in; ++i) planned_as[i] = static_cast<int>(i);
  auto materialise = [&](int v) {
    auto& pend = lazy[static_cast<std::size_t>(v)];
    if (!pend) return planned_as[static_cast<std::size_t>(v)];
    plan.push_back({&identity_loops(), pend->base, -1, pend->map, {}});
    planned_as[static_cast<std::size_t>(v)] = static_cast<int>(n_in + plan.size() - 1);
    pend.reset();
    return planned_as[static_cast<std::size_t>(v)];
  };
  for (std::size_t k = 0; k < n_steps; ++k) {
    const int out = static_cast<int>(n_in + k);
    const auto& args = p.steps[k].args;
    const cpu::step_loops* loops = &forms[k].cpu;
    const affine_role role = forms[k].affine;
    const bool scalar_op = role != affine_role::none && args.size() == 2 &&
                           (is_single[static_cast<std::size_t>(args[0])] != is_single[static_cast<std::size_t>(args[1])]) &&
                           (static_cast<std::size_t>(args[0]) < n_in || static_cast<std::size_t>(args[1]) < n_in);
    if (scalar_op) {
      const bool scalar_first = static_cast<std::size_t>(args[0]) < n_in && is_single[static_cast<std::size_t>(args[0])];
      const int v = scalar_first ? args[1] : args[0];
      const T s = single[static_cast<std::size_t>(scalar_first ? args[0] : args[1])];
      // The op as x*scale + shift, or nothing when it has no exact form (s - x is -x + s: exact).
      std::optional<affine<T>> op;
      if (role == affine_role::mul) op = affine<T>{s, -T(0)};
      else if (role == affine_role::add) op = affine<T>{T(1), s};
      else if (!scalar_first) op = affine<T>{T(1), -s};  // x - s == x + (-s)
      else op = affine<T>{T(-1), s};                     // s - x == -x + s
      // Composes `then` after `first` when the pair is still one multiply then one add.
      auto compose = [](const affine<T>& first, const affine<T>& then) -> std::optional<affine<T>> {
        if (first.identity()) return then;
        if (then.scale == T(1) && first.shift == T(0) && std::signbit(first.shift)) return affine<T>{first.scale, then.shift};
        return std::nullopt;
      };
      if (uses[static_cast<std::size_t>(v)] == 1) {
        if (auto& pend = lazy[static_cast<std::size_t>(v)]) {
          if (auto both = compose(pend->map, *op)) {
            lazy[static_cast<std::size_t>(out)] = pending{pend->base, *both};
            pend.reset();
            continue;
          }
        } else if (const int pv = planned_as[static_cast<std::size_t>(v)];
                   pv >= static_cast<int>(n_in) && plan[static_cast<std::size_t>(pv) - n_in].loops->unary()) {
          auto& producer = plan[static_cast<std::size_t>(pv) - n_in];
          if (auto both = compose(producer.post, *op)) {
            producer.post = *both;
            planned_as[static_cast<std::size_t>(out)] = pv;
            continue;
          }
        }
      }
      // Not foldable backwards: maybe into the step that reads it.
      lazy[static_cast<std::size_t>(out)] = pending{materialise(v), *op};
      continue;
    }
    if (loops->unary()) {
      auto& pend = lazy[static_cast<std::size_t>(args[0])];
      if (pend && uses[static_cast<std::size_t>(args[0])] == 1) {
        plan.push_back({loops, pend->base, -1, pend->map, {}});
        pend.reset();
      } else {
        plan.push_back({loops, materialise(args[0]), -1, {}, {}});
      }
    } else {
      const int a = materialise(args[0]);
      const int b = args.size() > 1 ? materialise(args[1]) : -1;
      plan.push_back({loops, a, b, {}, {}});
    }
    planned_as[static_cast<std::size_t>(out)] = static_cast<int>(n_in + plan.size() - 1);
  }
  // The last planned step must make the output (true for any program without dead steps).
  if (materialise(static_cast<int>(n_in + n_steps - 1)) != static_cast<int>(n_in + plan.size() - 1)) {
    plan.clear();
    for (std::size_t k = 0; k < n_steps; ++k) {
      const auto& args = p.steps[k].args;
      plan.push_back({&forms[k].cpu, args[0], args.size() > 1 ? args[1] : -1, {}, {}});
    }
  }
  return plan;
}

constexpr int64_t chunk = 512;  // elements per step loop: every value of a chunk stays in L1
constexpr int64_t prefetch_chunks = 4;  // how far ahead the inputs are prefetched (into L2)

/// Whether `t` is the trailing dims of `dims` (leading 1s aside), contiguous, with a period that
/// divides the chunk: then every chunk sees the same values, tiled once per task.
bool repeats_per_chunk(const tensor& t, const shape& dims) {
  if (!t.is_contiguous() || t.numel() <= 1 || chunk % t.numel() != 0) return false;
  const auto& s = t.shape();
  std::size_t lead = 0;
  while (lead < s.size() && s[lead] == 1) ++lead;
  const std::size_t rank = s.size() - lead;
  if (rank > dims.size()) return false;
  for (std::size_t k = 0; k < rank; ++k)
    if (s[lead + k] != dims[dims.size() - rank + k]) return false;
  return true;
}

template <class T>
expected<void> run_typed(const fused_program& p, const std::vector<fused_form>& forms, const std::vector<tensor>& in,
                         tensor& out) {
  const std::size_t n_inputs = in.size();
  // Inputs are full (contiguous, output shape), a single value repeated, or periodic: the
  // output's trailing dims (a bias over channels), whose period divides the chunk, so that one
  // tiled chunk serves every chunk.
  std::vector<const T*> full(n_inputs, nullptr), periodic(n_inputs, nullptr);
  std::vector<T> single(n_inputs, T(0));
  std::vector<bool> is_single(n_inputs + p.steps.size(), false);
  for (std::size_t i = 0; i < n_inputs; ++i) {
    if (in[i].numel() == 1 && out.numel() != 1) {
      single[i] = in[i].data<T>()[0];
      is_single[i] = true;
    } else if (in[i].numel() != out.numel()) {
      periodic[i] = in[i].data<T>();
    } else {
      full[i] = in[i].data<T>();
    }
  }
  const auto plan = plan_steps<T>(p, forms, is_single, single);
  T* result = out.data<T>();
  const int64_t total = out.numel();
  // A large output goes out with non-temporal stores: no read of each line before it is written.
  const bool streaming = static_cast<std::size_t>(total) * sizeof(T) >= cpu::streaming_store_bytes &&
                         reinterpret_cast<std::uintptr_t>(result) % 32 == 0;
  parallel_for((total + chunk - 1) / chunk, std::max<int64_t>(1, (1 << 16) / chunk), [&](int64_t first, int64_t last) {
    // Per task: one chunk buffer per value; single-valued inputs are filled once.
    std::vector<T> scratch(static_cast<std::size_t>((n_inputs + plan.size()) * chunk) + 64 / sizeof(T));
    T* const aligned = reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(scratch.data()) + 63) & ~std::uintptr_t{63});
    auto buffer = [&](std::size_t v) { return aligned + v * chunk; };
    for (std::size_t i = 0; i < n_inputs; ++i) {
      if (is_single[i]) std::fill_n(buffer(i), chunk, single[i]);
      if (periodic[i])
        for (int64_t at = 0, period = in[i].numel(); at < chunk; at += period) std::copy_n(periodic[i], period, buffer(i) + at);
    }
    std::vector<const T*> value(n_inputs + plan.size());
    for (int64_t c = first; c < last; ++c) {
      const int64_t begin = c * chunk;
      const int64_t n = std::min(chunk, total - begin);
      for (std::size_t i = 0; i < n_inputs; ++i) value[i] = full[i] ? full[i] + begin : buffer(i);
      // The hardware prefetcher stalls while the steps compute; asking for a later chunk now keeps
      // memory busy meanwhile (a GELU chain went from 14.5 to 12.2 ms on 16M floats).
      if (c + prefetch_chunks < last)
        for (std::size_t i = 0; i < n_inputs; ++i)
          if (full[i]) {
            const char* ahead = reinterpret_cast<const char*>(full[i] + begin + prefetch_chunks * chunk);
            for (std::size_t b = 0; b < chunk * sizeof(T); b += 64) __builtin_prefetch(ahead + b, 0, 2);
          }
      const bool stream_this = streaming && n == chunk;
      for (std::size_t k = 0; k < plan.size(); ++k) {
        const auto& s = plan[k];
        const bool last_step = k + 1 == plan.size();
        T* dst = last_step && !stream_this ? result + begin : buffer(n_inputs + k);
        const T* a = value[static_cast<std::size_t>(s.a)];
        if (s.loops->unary()) s.loops->template unary_for<T>()(dst, a, n, s.pre, s.post);
        else s.loops->template binary_for<T>()(dst, a, value[static_cast<std::size_t>(s.b)], n);
        value[n_inputs + k] = dst;
      }
      if (stream_this) cpu::stream_copy(result + begin, buffer(n_inputs + plan.size() - 1), chunk * sizeof(T));
    }
    if (streaming) cpu::stream_fence();
  });
  return {};
}

}  // namespace

expected<std::size_t> cpu_loop_count(const fused_program& p, const std::vector<bool>& single) {
  if (single.size() != p.inputs.size())
    return make_error(errc::invalid_argument, "cpu_loop_count: " + std::to_string(single.size()) + " flags for " +
                                                  std::to_string(p.inputs.size()) + " inputs");
  AF_TRY_ASSIGN(auto forms, forms_of(p));
  std::vector<bool> is_single(p.inputs.size() + p.steps.size(), false);
  std::copy(single.begin(), single.end(), is_single.begin());
  return plan_steps<float>(p, forms, is_single, std::vector<float>(p.inputs.size(), 2.0f)).size();
}

expected<tensor> run_fused_cpu(const fused_program& p, const std::vector<tensor>& inputs, const tensor* reuse) {
  if (inputs.size() != p.inputs.size())
    return make_error(errc::invalid_argument, "fused kernel takes " + std::to_string(p.inputs.size()) + " inputs, got " +
                                                  std::to_string(inputs.size()));
  AF_TRY_ASSIGN(auto forms, forms_of(p));
  const dtype type = p.out().type;
  shape dims;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].type() != p.inputs[i].type)
      return make_error(errc::dtype_mismatch, "fused kernel input " + std::to_string(i) + ": expected " +
                                                  std::string{to_string(p.inputs[i].type)} + ", got " +
                                                  std::string{to_string(inputs[i].type())});
    if (inputs[i].type() != type)  // run_typed reads every input as the output's type
      return make_error(errc::dtype_mismatch, "fused kernel input " + std::to_string(i) + " is " +
                                                  std::string{to_string(inputs[i].type())} + ", the kernel computes " +
                                                  std::string{to_string(type)});
    AF_TRY_ASSIGN(dims, broadcast_shapes(dims, inputs[i].shape(), "fused kernel"));
  }
  // Inputs that are neither the output's shape nor a single value are broadcast into place first.
  std::vector<tensor> ready;
  for (const auto& t : inputs) {
    if (t.numel() == 1 || (t.shape() == dims && t.is_contiguous()) || repeats_per_chunk(t, dims)) {
      ready.push_back(t);
      continue;
    }
    AF_TRY_ASSIGN(auto expanded, t.expand(dims));
    AF_TRY_ASSIGN(auto copy, expanded.clone());
    ready.push_back(std::move(copy));
  }
  const bool in_place = reuse && reuse->type() == type && reuse->shape() == dims && reuse->is_contiguous() &&
                        reuse->buffer().use_count() <= 2;  // the caller's `inputs` and `reuse` itself
  AF_TRY_ASSIGN(auto out, in_place ? expected<tensor>{*reuse} : tensor::empty(dims, type));
  if (out.numel() == 0) return out;
  if (type == dtype::f32) AF_TRY(run_typed<float>(p, forms, ready, out));
  else if (type == dtype::f64) AF_TRY(run_typed<double>(p, forms, ready, out));
  else return make_error(errc::dtype_mismatch, "fused kernels run f32 and f64, not " + std::string{to_string(type)});
  return out;
}

}  // namespace af::codegen
