#include "ops/train/schedules.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

namespace af::schedules {

namespace {

// Steps as a count of at least 1, so that no schedule divides by zero.
double at_least_one(int64_t steps) { return static_cast<double>(std::max<int64_t>(1, steps)); }

double cosine_of(double fraction, double alpha) {
  return (1 - alpha) * 0.5 * (1 + std::cos(std::numbers::pi * fraction)) + alpha;
}

}  // namespace

schedule constant(double learning_rate) {
  return [learning_rate](int64_t) { return learning_rate; };
}

schedule exponential_decay(double initial, int64_t decay_steps, double rate, bool staircase) {
  const double period = at_least_one(decay_steps);
  return [=](int64_t step) {
    double p = static_cast<double>(step) / period;
    if (staircase) p = std::floor(p);
    return initial * std::pow(rate, p);
  };
}

schedule cosine_decay(double initial, int64_t decay_steps, double alpha) {
  const double period = at_least_one(decay_steps);
  return [=](int64_t step) { return initial * cosine_of(std::min(static_cast<double>(step), period) / period, alpha); };
}

schedule cosine_decay_restarts(double initial, int64_t first_decay_steps, double t_mul, double m_mul, double alpha) {
  const double first = at_least_one(first_decay_steps);
  return [=](int64_t step) {
    double fraction = static_cast<double>(step) / first;  // of the first period
    double restarts = 0;
    if (t_mul == 1.0) {
      restarts = std::floor(fraction);
      fraction -= restarts;
    } else {
      // Periods 1, t, t^2, ...: the restart index is where the geometric sum passes `fraction`.
      restarts = std::floor(std::log(1 - fraction * (1 - t_mul)) / std::log(t_mul));
      const double done = (1 - std::pow(t_mul, restarts)) / (1 - t_mul);
      fraction = (fraction - done) / std::pow(t_mul, restarts);
    }
    // Each restart lowers the cosine's height by m_mul; the floor alpha stays.
    const double height = std::pow(m_mul, restarts);
    return initial * ((1 - alpha) * height * 0.5 * (1 + std::cos(std::numbers::pi * fraction)) + alpha);
  };
}

schedule linear_warmup(schedule after, int64_t warmup_steps, double from) {
  const double steps = at_least_one(warmup_steps);
  return [after = std::move(after), warmup_steps, steps, from](int64_t step) {
    if (step >= warmup_steps) return after(step - warmup_steps);
    return from + (after(0) - from) * static_cast<double>(step) / steps;
  };
}

}  // namespace af::schedules
