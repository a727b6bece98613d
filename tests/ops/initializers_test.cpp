// Weight initialisers: Keras' fans, the spread and bounds each promises, and the same values for
// the same seed.

#include <catch2/catch.hpp>

#include <cmath>

#include "ops/train/initializers.hpp"

using namespace af;

namespace {

struct moments {
  double mean = 0, stddev = 0, largest = 0;
};

moments moments_of(const tensor& t) {
  const auto v = t.to_vector<double>();
  moments m;
  for (double x : v) m.mean += x / static_cast<double>(v.size());
  for (double x : v) {
    m.stddev += (x - m.mean) * (x - m.mean) / static_cast<double>(v.size());
    m.largest = std::max(m.largest, std::fabs(x));
  }
  m.stddev = std::sqrt(m.stddev);
  return m;
}

}  // namespace

TEST_CASE("fans count the receptive field of convolution filters", "[train][initializers]") {
  CHECK(initializers::fans_of({784, 256}).in == 784);
  CHECK(initializers::fans_of({784, 256}).out == 256);
  CHECK(initializers::fans_of({3, 3, 32, 64}).in == 9 * 32);
  CHECK(initializers::fans_of({3, 3, 32, 64}).out == 9 * 64);
  CHECK(initializers::fans_of({10}).in == 10);
  CHECK(initializers::fans_of({}).out == 1);
}

TEST_CASE("glorot and he initialisers have the spread and bounds Keras gives them", "[train][initializers]") {
  const shape dense{400, 200};
  const double glorot_limit = std::sqrt(6.0 / 600), he_limit = std::sqrt(6.0 / 400);
  const auto gu = moments_of(initializers::glorot_uniform(dense, 1).value());
  CHECK(gu.largest <= glorot_limit);
  CHECK(gu.stddev == Approx(glorot_limit / std::sqrt(3.0)).epsilon(0.02));  // uniform: limit / sqrt(3)
  const auto hu = moments_of(initializers::he_uniform(dense, 2).value());
  CHECK(hu.largest <= he_limit);
  CHECK(hu.stddev == Approx(he_limit / std::sqrt(3.0)).epsilon(0.02));
  const auto gn = moments_of(initializers::glorot_normal(dense, 3).value());
  CHECK(std::fabs(gn.mean) < 0.002);
  CHECK(gn.stddev == Approx(std::sqrt(2.0 / 600)).epsilon(0.02));
  CHECK(gn.largest <= 2 * std::sqrt(2.0 / 600) / 0.87962566103423978 + 1e-6);  // truncated at two of its stddevs
  const auto hn = moments_of(initializers::he_normal({3, 3, 64, 64}, 4).value());
  CHECK(hn.stddev == Approx(std::sqrt(2.0 / (9 * 64))).epsilon(0.02));
}

TEST_CASE("the same seed gives the same weights, another seed others", "[train][initializers]") {
  const auto a = initializers::he_normal({64, 32}, 9).value().to_vector<float>();
  const auto b = initializers::he_normal({64, 32}, 9).value().to_vector<float>();
  const auto c = initializers::he_normal({64, 32}, 10).value().to_vector<float>();
  CHECK(a == b);
  CHECK(a != c);
  CHECK(initializers::glorot_uniform({4}, 1, dtype::i32).error_value().code == errc::dtype_mismatch);
  CHECK(initializers::truncated_normal({4}, 1, -1.0).error_value().code == errc::invalid_argument);
}
