// Learning-rate schedules at chosen steps against values worked out by hand from their definitions.

#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "ops/train/schedules.hpp"

using namespace af;

TEST_CASE("exponential decay, smooth and staircase", "[train][schedules]") {
  auto smooth = schedules::exponential_decay(0.1, 100, 0.5);
  auto stairs = schedules::exponential_decay(0.1, 100, 0.5, true);
  CHECK(smooth(0) == Approx(0.1));
  CHECK(smooth(100) == Approx(0.05));
  CHECK(smooth(150) == Approx(0.1 * std::pow(0.5, 1.5)));
  CHECK(stairs(150) == Approx(0.05));
  CHECK(stairs(199) == Approx(0.05));
  CHECK(stairs(200) == Approx(0.025));
}

TEST_CASE("cosine decay falls to initial * alpha and stays there", "[train][schedules]") {
  auto lr = schedules::cosine_decay(1.0, 100, 0.1);
  CHECK(lr(0) == Approx(1.0));
  CHECK(lr(50) == Approx(0.9 * 0.5 + 0.1));  // cos(pi/2) = 0
  CHECK(lr(100) == Approx(0.1));
  CHECK(lr(500) == Approx(0.1));
}

TEST_CASE("cosine decay with restarts: longer and lower periods", "[train][schedules]") {
  // Periods of 10, 20, 40 steps (t_mul 2); each restart at half the height (m_mul 0.5).
  auto lr = schedules::cosine_decay_restarts(1.0, 10, 2.0, 0.5);
  CHECK(lr(0) == Approx(1.0));
  CHECK(lr(5) == Approx(0.5));           // middle of the first period
  CHECK(lr(10) == Approx(0.5));          // first restart, at half height
  CHECK(lr(20) == Approx(0.25));         // middle of the second period (10 + 10 of 20)
  CHECK(lr(30) == Approx(0.25));         // second restart, at a quarter
  CHECK(lr(29) == Approx(0.5 * 0.5 * (1 + std::cos(std::numbers::pi * 19.0 / 20.0))));
  auto same_length = schedules::cosine_decay_restarts(2.0, 10, 1.0, 1.0);
  CHECK(same_length(13) == Approx(same_length(3)));
}

TEST_CASE("linear warmup rises to the schedule it hands over to", "[train][schedules]") {
  auto lr = schedules::linear_warmup(schedules::cosine_decay(1.0, 100), 10);
  CHECK(lr(0) == Approx(0.0));
  CHECK(lr(5) == Approx(0.5));
  CHECK(lr(10) == Approx(1.0));
  CHECK(lr(60) == Approx(0.5));  // 50 steps into the cosine
  CHECK(schedules::constant(0.3)(12345) == 0.3);
}
