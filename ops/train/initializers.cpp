#include "ops/train/initializers.hpp"

#include <cmath>
#include <vector>

#include "ops/elementwise.hpp"
#include "ops/random.hpp"

namespace af::initializers {

namespace {

// The standard deviation of a unit normal truncated to +-2: Keras divides by it so that the
// truncated values have the intended spread.
constexpr double truncated_unit_stddev = 0.87962566103423978;

expected<void> check_floating(const char* who, dtype type) {
  if (!is_floating(type))
    return make_error(errc::dtype_mismatch, std::string(who) + ": initialisers make floating tensors, not " +
                                                std::string{to_string(type)});
  return {};
}

}  // namespace

fans fans_of(const shape& dims) {
  if (dims.empty()) return {};
  if (dims.size() == 1) return {static_cast<double>(dims[0]), static_cast<double>(dims[0])};
  double receptive = 1;
  for (std::size_t i = 0; i + 2 < dims.size(); ++i) receptive *= static_cast<double>(dims[i]);
  return {receptive * static_cast<double>(dims[dims.size() - 2]), receptive * static_cast<double>(dims.back())};
}

expected<tensor> truncated_normal(const shape& dims, uint64_t seed, double stddev, dtype type) {
  AF_TRY(check_floating("truncated_normal", type));
  if (!(stddev >= 0) || !std::isfinite(stddev))
    return make_error(errc::invalid_argument, "truncated_normal: stddev must be finite and >= 0, got " + std::to_string(stddev));
  philox_generator gen{seed, 0};
  AF_TRY_ASSIGN(auto first, gen.normal(dims, dtype::f64));
  std::vector<double> values = first.to_vector<double>();
  // Redraw what lies beyond two standard deviations (about 4.6% each round) from the next streams.
  std::vector<std::size_t> outside;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (std::fabs(values[i]) > 2.0) outside.push_back(i);
  while (!outside.empty()) {
    AF_TRY_ASSIGN(auto more, gen.normal({static_cast<int64_t>(outside.size())}, dtype::f64));
    const auto redrawn = more.to_vector<double>();
    std::vector<std::size_t> still;
    for (std::size_t k = 0; k < outside.size(); ++k) {
      if (std::fabs(redrawn[k]) > 2.0) still.push_back(outside[k]);
      else values[outside[k]] = redrawn[k];
    }
    outside = std::move(still);
  }
  for (auto& v : values) v *= stddev;
  return cast(tensor::from_vector<double>(values, dims), type);
}

expected<tensor> glorot_uniform(const shape& dims, uint64_t seed, dtype type) {
  AF_TRY(check_floating("glorot_uniform", type));
  const auto f = fans_of(dims);
  const double limit = std::sqrt(6.0 / (f.in + f.out));
  return random_uniform(dims, seed, type, -limit, limit);
}

expected<tensor> glorot_normal(const shape& dims, uint64_t seed, dtype type) {
  const auto f = fans_of(dims);
  return truncated_normal(dims, seed, std::sqrt(2.0 / (f.in + f.out)) / truncated_unit_stddev, type);
}

expected<tensor> he_uniform(const shape& dims, uint64_t seed, dtype type) {
  AF_TRY(check_floating("he_uniform", type));
  const double limit = std::sqrt(6.0 / fans_of(dims).in);
  return random_uniform(dims, seed, type, -limit, limit);
}

expected<tensor> he_normal(const shape& dims, uint64_t seed, dtype type) {
  return truncated_normal(dims, seed, std::sqrt(2.0 / fans_of(dims).in) / truncated_unit_stddev, type);
}

}  // namespace af::initializers
