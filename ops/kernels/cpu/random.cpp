// Philox4x32-10 random tensors on the CPU (see ops/random.hpp).
//
// Element layout: the counter is {block lo, block hi, offset lo, offset hi} and the key the seed.
// One Philox call gives four 32-bit words; 32-bit-or-narrower outputs use one word per element
// (Box-Muller turns two words into two normals), f64 uses two words per element. Element i thus
// lives in block i / 4 (i / 2 for f64), which fixes every value independently of the chunking.
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <type_traits>

#include "ops/kernels/cpu/elementwise_loops.hpp"
#include "ops/random.hpp"

namespace af {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) noexcept {
  constexpr uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += w0;
      k[1] += w1;
    }
    const uint64_t p0 = static_cast<uint64_t>(m0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(m1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

namespace {

using cpu::compute_t;

std::array<uint32_t, 4> block_words(uint64_t seed, uint64_t offset, uint64_t block) noexcept {
  return philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                        static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// Uniform doubles from raw words: [0, 1) and (0, 1] (the latter is safe for log).
double unit_24(uint32_t w) noexcept { return static_cast<double>(w >> 8) * 0x1p-24; }
double unit_24_open(uint32_t w) noexcept { return static_cast<double>((w >> 8) + 1) * 0x1p-24; }
double unit_53(uint32_t hi, uint32_t lo) noexcept {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * 0x1p-53;
}
double unit_53_open(uint32_t hi, uint32_t lo) noexcept {
  return static_cast<double>((((static_cast<uint64_t>(hi) << 32) | lo) >> 11) + 1) * 0x1p-53;
}

// The largest T below v: rounding to T can land a value just under `high` on `high` itself.
template <class T>
T next_below(T v) noexcept {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    T r = v;  // sign-magnitude bits: step the magnitude toward -inf
    if (static_cast<float>(v) > 0.0f) r.bits = static_cast<uint16_t>(v.bits - 1);
    else if (static_cast<float>(v) == 0.0f) r.bits = 0x8001u;
    else r.bits = static_cast<uint16_t>(v.bits + 1);
    return r;
  } else {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  }
}

// Fills n elements from blocks of `per_block`; make(words, lane) gives the element at that lane.
template <class T, int PerBlock, class Make>
void fill_blocks(T* out, int64_t n, uint64_t seed, uint64_t offset, Make make) {
  const int64_t blocks = (n + PerBlock - 1) / PerBlock;
  parallel_for(blocks, cpu::elementwise_grain / PerBlock, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const auto words = block_words(seed, offset, static_cast<uint64_t>(b));
      const int64_t first = b * PerBlock;
      const int lanes = static_cast<int>(std::min<int64_t>(PerBlock, n - first));
      for (int lane = 0; lane < lanes; ++lane) out[first + lane] = make(words, lane);
    }
  });
}

expected<void> check_request(const char* op, const shape& dims, dtype type, bool floating_only) {
  for (int64_t d : dims)
    if (d < 0) return make_error(errc::invalid_argument, std::string(op) + ": negative dimension in shape " + to_string(dims));
  if (floating_only && !is_floating(type))
    return make_error(errc::unsupported,
                      std::string(op) + ": " + std::string(to_string(type)) + " is not a floating dtype");
  return {};
}

expected<tensor> uniform_at(const shape& dims, uint64_t seed, uint64_t offset, dtype type, double low, double high) {
  AF_TRY(check_request("random_uniform", dims, type, true));
  if (!std::isfinite(low) || !std::isfinite(high) || low > high)
    return make_error(errc::invalid_argument, "random_uniform: need finite low <= high, got [" +
                                                  std::to_string(low) + ", " + std::to_string(high) + ")");
  AF_TRY_ASSIGN(tensor out, tensor::empty(dims, type));
  const double span = high - low;
  visit_dtype(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      auto finish = [&](double u) {
        const T v = T(static_cast<compute_t<T>>(low + span * u));
        return (span > 0 && static_cast<double>(static_cast<compute_t<T>>(v)) >= high) ? next_below(v) : v;
      };
      if constexpr (std::is_same_v<T, double>) {
        fill_blocks<T, 2>(out.data<T>(), out.numel(), seed, offset, [&](const auto& w, int lane) {
          return finish(unit_53(w[2 * lane], w[2 * lane + 1]));
        });
      } else {
        fill_blocks<T, 4>(out.data<T>(), out.numel(), seed, offset,
                          [&](const auto& w, int lane) { return finish(unit_24(w[lane])); });
      }
    }
  });
  return out;
}

expected<tensor> normal_at(const shape& dims, uint64_t seed, uint64_t offset, dtype type, double mean, double stddev) {
  AF_TRY(check_request("random_normal", dims, type, true));
  if (!std::isfinite(mean) || !std::isfinite(stddev) || stddev < 0)
    return make_error(errc::invalid_argument, "random_normal: need a finite mean and stddev >= 0, got mean " +
                                                  std::to_string(mean) + " and stddev " + std::to_string(stddev));
  AF_TRY_ASSIGN(tensor out, tensor::empty(dims, type));
  // Box-Muller: u1 in (0, 1], u2 in [0, 1) give two independent standard normals.
  auto box_muller = [&](double u1, double u2, int which) {
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    return mean + stddev * r * (which == 0 ? std::cos(angle) : std::sin(angle));
  };
  visit_dtype(type, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, double>) {
      fill_blocks<T, 2>(out.data<T>(), out.numel(), seed, offset, [&](const auto& w, int lane) {
        return box_muller(unit_53_open(w[0], w[1]), unit_53(w[2], w[3]), lane);
      });
    } else if constexpr (std::is_floating_point_v<C>) {
      fill_blocks<T, 4>(out.data<T>(), out.numel(), seed, offset, [&](const auto& w, int lane) {
        const int pair = lane & ~1;
        return T(static_cast<C>(box_muller(unit_24_open(w[pair]), unit_24(w[pair + 1]), lane & 1)));
      });
    }
  });
  return out;
}

expected<tensor> bernoulli_at(const shape& dims, uint64_t seed, uint64_t offset, double p) {
  AF_TRY(check_request("random_bernoulli", dims, dtype::boolean, false));
  if (!(p >= 0.0 && p <= 1.0))
    return make_error(errc::invalid_argument, "random_bernoulli: p must be in [0, 1], got " + std::to_string(p));
  AF_TRY_ASSIGN(tensor out, tensor::empty(dims, dtype::boolean));
  // P(word < threshold) = threshold / 2^32 exactly; p = 1 gives 2^32, above every word.
  const uint64_t threshold = static_cast<uint64_t>(std::ldexp(p, 32));
  fill_blocks<bool, 4>(out.data<bool>(), out.numel(), seed, offset,
                       [&](const auto& w, int lane) { return static_cast<uint64_t>(w[lane]) < threshold; });
  return out;
}

}  // namespace

expected<tensor> philox_generator::uniform(const shape& dims, dtype type, double low, double high) {
  AF_TRY_ASSIGN(tensor out, uniform_at(dims, seed, offset, type, low, high));
  ++offset;
  return out;
}

expected<tensor> philox_generator::normal(const shape& dims, dtype type, double mean, double stddev) {
  AF_TRY_ASSIGN(tensor out, normal_at(dims, seed, offset, type, mean, stddev));
  ++offset;
  return out;
}

expected<tensor> philox_generator::bernoulli(const shape& dims, double p) {
  AF_TRY_ASSIGN(tensor out, bernoulli_at(dims, seed, offset, p));
  ++offset;
  return out;
}

expected<tensor> random_uniform(const shape& dims, uint64_t seed, dtype type, double low, double high) {
  return uniform_at(dims, seed, 0, type, low, high);
}

expected<tensor> random_normal(const shape& dims, uint64_t seed, dtype type, double mean, double stddev) {
  return normal_at(dims, seed, 0, type, mean, stddev);
}

expected<tensor> random_bernoulli(const shape& dims, uint64_t seed, double p) {
  return bernoulli_at(dims, seed, 0, p);
}

}  // namespace af
