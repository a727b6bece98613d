// Reductions on the CPU (see ops/reduce.hpp for the semantics).
//
// A reduction is planned as "kept" dims (one output each, in output order) and "reduced" dims, each
// coalesced. Two loop shapes cover the layouts that matter:
//  - row: each output reduces its own elements; the innermost reduced run is read with 8
//    independent accumulators (vectorisable, and more accurate than one running sum). Long
//    reductions are cut into fixed blocks whose partials are merged in order, so a full reduction
//    runs on every thread yet gives the same bits for any thread budget.
//  - column: when the innermost kept dim is contiguous and the reduced ones are not (reduce axis 0
//    of a matrix), a tile of outputs accumulates one contiguous row at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>

#include "ops/kernels/cpu/elementwise_loops.hpp"
#include "ops/reduce.hpp"

namespace af {

namespace {

using cpu::compute_t;

// -- reducers: init, step (fold in one element), merge (two partials), finish (to the output) ----

template <class T>
struct sum_reducer {
  using C = compute_t<T>;
  using acc = std::conditional_t<std::is_floating_point_v<C>, double, uint64_t>;  // ints wrap
  acc init() const { return 0; }
  acc step(acc a, T x) const {
    if constexpr (std::is_floating_point_v<C>) return a + static_cast<double>(static_cast<C>(x));
    else return a + static_cast<uint64_t>(static_cast<int64_t>(x));
  }
  acc merge(acc a, acc b) const { return a + b; }
  T finish(acc a, int64_t) const {
    if constexpr (std::is_floating_point_v<C>) return T(static_cast<C>(a));
    else return static_cast<T>(a);
  }
};

template <class T>
struct mean_reducer : sum_reducer<T> {
  using acc = typename sum_reducer<T>::acc;
  T finish(acc a, int64_t count) const {  // 0 / 0 is NaN for an empty mean
    return T(static_cast<compute_t<T>>(a / static_cast<double>(count)));
  }
};

// Max (Greater = true) or min; bool accumulates as a byte so partial arrays are plain memory.
template <class T, bool Greater>
struct extreme_reducer {
  using C = compute_t<T>;
  using acc = std::conditional_t<std::is_same_v<T, bool>, uint8_t, C>;
  acc init() const {
    if constexpr (std::is_floating_point_v<C>)
      return Greater ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else if constexpr (std::is_same_v<T, bool>) return Greater ? 0 : 1;
    else return Greater ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  acc merge(acc a, acc v) const {
    const bool better = Greater ? v > a : v < a;
    if constexpr (std::is_floating_point_v<C>) return (better || v != v) ? v : a;  // NaN sticks
    else return better ? v : a;
  }
  acc step(acc a, T x) const { return merge(a, static_cast<acc>(static_cast<C>(x))); }
  T finish(acc a, int64_t) const {
    if constexpr (std::is_same_v<T, bool>) return a != 0;
    else return T(a);
  }
};

// Streaming log-sum-exp: the state is (running max m, sum of exp(x - m)); merging rescales the
// smaller partial, so no exp ever sees a positive argument.
template <class T>
struct logsumexp_reducer {
  struct acc {
    double m, s;
  };
  acc init() const { return {-std::numeric_limits<double>::infinity(), 0.0}; }
  acc merge(acc a, acc b) const {
    if (std::isnan(a.m) || std::isnan(b.m)) return {std::numeric_limits<double>::quiet_NaN(), 1.0};
    if (b.m > a.m) std::swap(a, b);
    if (a.m == -std::numeric_limits<double>::infinity()) return a;  // everything so far is -inf
    if (a.m == std::numeric_limits<double>::infinity()) return {a.m, 1.0};
    return {a.m, a.s + b.s * std::exp(b.m - a.m)};
  }
  acc step(acc a, T x) const { return merge(a, {static_cast<double>(static_cast<compute_t<T>>(x)), 1.0}); }
  T finish(acc a, int64_t) const {
    if (std::isnan(a.m) || std::isinf(a.m)) return T(static_cast<compute_t<T>>(a.m));
    return T(static_cast<compute_t<T>>(a.m + std::log(a.s)));
  }
};

// -- planning --------------------------------------------------------------------------------------

struct dim_set {
  std::vector<int64_t> dims, st;
};

// Drops size-1 dims and merges neighbours that are one run in memory.
dim_set coalesce(const std::vector<std::pair<int64_t, int64_t>>& dims_strides) {
  dim_set out;
  for (auto [d, s] : dims_strides) {
    if (d == 1) continue;
    if (!out.dims.empty() && out.st.back() == s * d) {
      out.dims.back() *= d;
      out.st.back() = s;
    } else {
      out.dims.push_back(d);
      out.st.push_back(s);
    }
  }
  return out;
}

int64_t offset_of(const dim_set& k, int64_t index) {
  int64_t off = 0;
  for (std::size_t d = k.dims.size(); d-- > 0;) {
    off += (index % k.dims[d]) * k.st[d];
    index /= k.dims[d];
  }
  return off;
}

cpu::loop_plan<1> run_plan(const dim_set& r) {
  cpu::loop_plan<1> p;
  p.dims = r.dims.empty() ? std::vector<int64_t>{1} : r.dims;
  p.st[0] = r.st.empty() ? std::vector<int64_t>{0} : r.st;
  p.numel = af::numel(p.dims);
  return p;
}

// -- loops -----------------------------------------------------------------------------------------

template <class T, class Red>
typename Red::acc reduce_run(const T* __restrict x, int64_t s, int64_t n, const Red& red) {
  constexpr int lanes = 8;
  typename Red::acc l[lanes];
  for (auto& v : l) v = red.init();
  int64_t i = 0;
  if (s == 1) {
    for (; i + lanes <= n; i += lanes)
      for (int j = 0; j < lanes; ++j) l[j] = red.step(l[j], x[i + j]);
  } else {
    for (; i + lanes <= n; i += lanes)
      for (int j = 0; j < lanes; ++j) l[j] = red.step(l[j], x[(i + j) * s]);
  }
  for (; i < n; ++i) l[0] = red.step(l[0], x[i * s]);
  for (int w = lanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) l[j] = red.merge(l[j], l[j + w]);
  return l[0];
}

template <class T, class Red>
typename Red::acc reduce_range(const cpu::loop_plan<1>& rp, const T* base, int64_t begin, int64_t end,
                               const Red& red) {
  auto a = red.init();
  const int64_t s = rp.inner_stride(0);
  cpu::for_each_run(rp, begin, end, [&](int64_t, const std::array<int64_t, 1>& off, int64_t n) {
    a = red.merge(a, reduce_run(base + off[0], s, n, red));
  });
  return a;
}

constexpr int64_t reduce_block = 32 * 1024;  // elements per partial; fixed so results are reproducible

template <class T, class Red>
void reduce_rows(const dim_set& kept, const dim_set& reduced, const T* x, T* out, const Red& red) {
  const int64_t outputs = af::numel(kept.dims), count = af::numel(reduced.dims);
  const auto rp = run_plan(reduced);
  const int64_t blocks = std::max<int64_t>(1, (count + reduce_block - 1) / reduce_block);
  if (blocks == 1) {
    const int64_t grain = std::max<int64_t>(1, cpu::elementwise_grain / std::max<int64_t>(count, 1));
    parallel_for(outputs, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o)
        out[o] = red.finish(reduce_range(rp, x + offset_of(kept, o), 0, count, red), count);
    });
    return;
  }
  using acc = typename Red::acc;
  std::unique_ptr<acc[]> partial(new acc[static_cast<std::size_t>(outputs * blocks)]);
  parallel_for(outputs * blocks, std::max<int64_t>(1, cpu::elementwise_grain / reduce_block),
               [&](int64_t begin, int64_t end) {
                 for (int64_t w = begin; w < end; ++w) {
                   const int64_t o = w / blocks, b = w % blocks;
                   partial[w] = reduce_range(rp, x + offset_of(kept, o), b * reduce_block,
                                             std::min(count, (b + 1) * reduce_block), red);
                 }
               });
  for (int64_t o = 0; o < outputs; ++o) {
    acc a = partial[o * blocks];
    for (int64_t b = 1; b < blocks; ++b) a = red.merge(a, partial[o * blocks + b]);
    out[o] = red.finish(a, count);
  }
}

template <class T, class Red>
void reduce_columns(const dim_set& kept, const dim_set& reduced, const T* x, T* out, const Red& red) {
  constexpr int64_t tile = 256;
  const int64_t outputs = af::numel(kept.dims), count = af::numel(reduced.dims);
  const int64_t inner = kept.dims.back(), outer = outputs / inner;
  const int64_t tiles = (inner + tile - 1) / tile;
  const auto rp = run_plan(reduced);
  const int64_t sr = rp.inner_stride(0);
  const int64_t grain = std::max<int64_t>(1, cpu::elementwise_grain / (tile * std::max<int64_t>(count, 1)));
  parallel_for(outer * tiles, grain, [&](int64_t begin, int64_t end) {
    typename Red::acc a[tile];
    for (int64_t w = begin; w < end; ++w) {
      const int64_t first = (w / tiles) * inner + (w % tiles) * tile;
      const int64_t width = std::min(tile, inner - (w % tiles) * tile);
      const T* base = x + offset_of(kept, first);
      for (int64_t k = 0; k < width; ++k) a[k] = red.init();
      cpu::for_each_run(rp, 0, count, [&](int64_t, const std::array<int64_t, 1>& off, int64_t n) {
        for (int64_t j = 0; j < n; ++j) {
          const T* __restrict row = base + off[0] + j * sr;
          for (int64_t k = 0; k < width; ++k) a[k] = red.step(a[k], row[k]);
        }
      });
      for (int64_t k = 0; k < width; ++k) out[first + k] = red.finish(a[k], count);
    }
  });
}

// -- entry points ----------------------------------------------------------------------------------

enum class accepts { numeric, floating, any };

// Marks the reduced axes; out_of_range / invalid_argument naming `op` for bad axes.
expected<std::vector<bool>> reduced_axes(const char* op, const tensor& x, const std::vector<int64_t>& axes) {
  const int64_t rank = x.ndim();
  std::vector<bool> mask(static_cast<std::size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return make_error(errc::out_of_range, std::string(op) + ": axis " + std::to_string(a) +
                                                " is out of range for shape " + to_string(x.shape()));
    const auto n = static_cast<std::size_t>(a < 0 ? a + rank : a);
    if (mask[n])
      return make_error(errc::invalid_argument, std::string(op) + ": axis " + std::to_string(a) +
                                                    " is repeated in " + to_string(axes));
    mask[n] = true;
  }
  return mask;
}

expected<void> check_dtype(const char* op, const tensor& x, accepts allowed) {
  if (allowed == accepts::floating && !is_floating(x.type()))
    return make_error(errc::unsupported,
                      std::string(op) + ": " + std::string(to_string(x.type())) + " is not a floating dtype");
  if (allowed == accepts::numeric && x.type() == dtype::boolean)
    return make_error(errc::unsupported, std::string(op) + ": bool is not a numeric dtype");
  return {};
}

template <class T>
constexpr bool accepted(accepts allowed) {
  if (allowed == accepts::floating) return std::is_floating_point_v<compute_t<T>>;
  if (allowed == accepts::numeric) return !std::is_same_v<T, bool>;
  return true;
}

template <template <class> class Red, accepts Allowed>
expected<tensor> reduce(const char* op, const tensor& x, const std::vector<int64_t>& axes, bool keepdims,
                        bool needs_elements) {
  AF_TRY(cpu::check_cpu(op, {&x}));
  AF_TRY(check_dtype(op, x, Allowed));
  AF_TRY_ASSIGN(std::vector<bool> mask, reduced_axes(op, x, axes));
  shape out_shape;
  std::vector<std::pair<int64_t, int64_t>> kept_ds, reduced_ds;
  for (int d = 0; d < x.ndim(); ++d) {
    if (mask[d]) {
      reduced_ds.emplace_back(x.dim(d), x.strides()[d]);
      if (keepdims) out_shape.push_back(1);
    } else {
      kept_ds.emplace_back(x.dim(d), x.strides()[d]);
      out_shape.push_back(x.dim(d));
    }
  }
  // Reduced dims in memory order (largest stride outside) so transposed inputs read forwards.
  std::stable_sort(reduced_ds.begin(), reduced_ds.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const dim_set kept = coalesce(kept_ds), reduced = coalesce(reduced_ds);
  const int64_t count = af::numel(reduced.dims);
  if (needs_elements && count == 0 && af::numel(out_shape) > 0)
    return make_error(errc::invalid_argument, std::string(op) + ": cannot reduce an empty dimension of shape " +
                                                  to_string(x.shape()) + " over axes " + to_string(axes));
  AF_TRY_ASSIGN(tensor out, tensor::empty(out_shape, x.type()));
  if (out.numel() == 0) return out;
  visit_dtype(x.type(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (accepted<T>(Allowed)) {  // only dtypes that passed check_dtype
      const Red<T> red;
      T* dst = out.data<T>();
      if (count == 0) {
        for (int64_t o = 0; o < out.numel(); ++o) dst[o] = red.finish(red.init(), 0);
        return;
      }
      const bool columns = !kept.dims.empty() && kept.st.back() == 1 && kept.dims.back() >= 16 &&
                           (reduced.st.empty() || reduced.st.back() != 1);
      if (columns) reduce_columns(kept, reduced, x.data<T>(), dst, red);
      else reduce_rows(kept, reduced, x.data<T>(), dst, red);
    }
  });
  return out;
}

template <class T> using max_reducer = extreme_reducer<T, true>;
template <class T> using min_reducer = extreme_reducer<T, false>;

// Index of the first best element of x[0], x[s], ... x[(n-1)s]; the first NaN wins (like NumPy).
template <class T, bool Greater>
int64_t arg_scan(const T* x, int64_t s, int64_t n) {
  using C = compute_t<T>;
  C best = static_cast<C>(x[0]);
  int64_t at = 0;
  if constexpr (std::is_floating_point_v<C>)
    if (best != best) return 0;
  for (int64_t i = 1; i < n; ++i) {
    const C v = static_cast<C>(x[i * s]);
    if constexpr (std::is_floating_point_v<C>)
      if (v != v) return i;
    if (Greater ? v > best : v < best) {
      best = v;
      at = i;
    }
  }
  return at;
}

template <bool Greater>
expected<tensor> arg_extreme(const char* op, const tensor& x, int64_t axis, bool keepdims) {
  AF_TRY(cpu::check_cpu(op, {&x}));
  const int64_t rank = x.ndim();
  if (axis < -rank || axis >= rank)
    return make_error(errc::out_of_range, std::string(op) + ": axis " + std::to_string(axis) +
                                              " is out of range for shape " + to_string(x.shape()));
  const int a = static_cast<int>(axis < 0 ? axis + rank : axis);
  shape out_shape;
  std::vector<std::pair<int64_t, int64_t>> kept_ds;
  for (int d = 0; d < rank; ++d) {
    if (d == a) {
      if (keepdims) out_shape.push_back(1);
      continue;
    }
    kept_ds.emplace_back(x.dim(d), x.strides()[d]);
    out_shape.push_back(x.dim(d));
  }
  const int64_t n = x.dim(a), step = x.strides()[a];
  if (n == 0 && af::numel(out_shape) > 0)
    return make_error(errc::invalid_argument, std::string(op) + ": cannot reduce an empty dimension of shape " +
                                                  to_string(x.shape()) + " along axis " + std::to_string(axis));
  AF_TRY_ASSIGN(tensor out, tensor::empty(out_shape, dtype::i64));
  const dim_set kept = coalesce(kept_ds);
  int64_t* dst = out.data<int64_t>();
  visit_dtype(x.type(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    const int64_t grain = std::max<int64_t>(1, cpu::elementwise_grain / std::max<int64_t>(n, 1));
    parallel_for(out.numel(), grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) dst[o] = arg_scan<T, Greater>(src + offset_of(kept, o), step, n);
    });
  });
  return out;
}

}  // namespace

expected<tensor> reduce_sum(const tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  return reduce<sum_reducer, accepts::numeric>("reduce_sum", x, axes, keepdims, false);
}
expected<tensor> reduce_mean(const tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  return reduce<mean_reducer, accepts::floating>("reduce_mean", x, axes, keepdims, false);
}
expected<tensor> reduce_max(const tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  return reduce<max_reducer, accepts::any>("reduce_max", x, axes, keepdims, true);
}
expected<tensor> reduce_min(const tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  return reduce<min_reducer, accepts::any>("reduce_min", x, axes, keepdims, true);
}
expected<tensor> reduce_logsumexp(const tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  return reduce<logsumexp_reducer, accepts::floating>("reduce_logsumexp", x, axes, keepdims, false);
}

expected<tensor> argmax(const tensor& x, int64_t axis, bool keepdims) {
  return arg_extreme<true>("argmax", x, axis, keepdims);
}
expected<tensor> argmin(const tensor& x, int64_t axis, bool keepdims) {
  return arg_extreme<false>("argmin", x, axis, keepdims);
}

}  // namespace af
