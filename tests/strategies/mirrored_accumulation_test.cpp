// mirrored_strategy's two ways of spending less on the ring: gradient accumulation (DDP's no_sync,
// Keras' gradient_accumulation_steps) ends where one replica stepping on each window's batches
// together does, and a failed batch cancels its window's update on every replica; reducing in
// bfloat16 ends near the f32 reduction.

#include <catch2/catch.hpp>

#include "actors/runtime.hpp"
#include "ops/array_ops.hpp"
#include "strategies/strategy.hpp"

#include "digits_like.hpp"

using namespace af;
using namespace af::testing;

namespace {

optimizers::optimizer sgd() { return optimizers::optimizer::sgd({.learning_rate = 0.05, .momentum = 0.9}); }

std::unique_ptr<distribute::replica_set> start(runtime& rt, nn::model& model, std::vector<std::string> devices,
                                               distribute::mirrored_options options) {
  auto s = distribute::mirrored_strategy(std::move(devices), options);
  REQUIRE(s);
  auto set = (*s)->start(rt, model);
  REQUIRE(set);
  return std::move(*set);
}

}  // namespace

TEST_CASE("accumulating 4 batches per update ends where one replica stepping on the 4 together does", "[cpu][strategies]") {
  runtime rt;
  const auto devices = GENERATE(std::vector<std::string>{"cpu:0"}, std::vector<std::string>{"cpu:0", "cpu:1"});
  INFO(devices.size() << " replica(s)");
  auto one = digits_like_mlp(sgd());
  auto accumulating = digits_like_mlp(sgd());
  auto set = start(rt, accumulating, devices, {.accumulation_steps = 4});
  for (uint64_t window = 0; window < 5; ++window) {
    std::vector<tensor> images, labels;
    for (uint64_t b = 0; b < 4; ++b) {
      const auto part = make_batch(16, 200 + 4 * window + b);
      auto r = set->train_on_batch({part.images}, {part.labels}, 0);
      REQUIRE(r);
      CHECK(r->predictions[0].dim(0) == 16);  // each batch's own results
      CHECK(accumulating.updates_done() == static_cast<int64_t>(window + (b == 3 ? 1 : 0)));
      images.push_back(part.images);
      labels.push_back(part.labels);
    }
    REQUIRE(one.train_on_batch({concat(images, 0).value()}, {concat(labels, 0).value()}, 0));
  }
  CHECK(weight_distance(accumulating, one) <= 1e-5);
  CHECK(weight_distance(one, digits_like_mlp(sgd())) > 1e-3);  // the updates did move the weights
}

TEST_CASE("a batch that fails inside an accumulation window cancels that window's update on every replica", "[cpu][strategies]") {
  runtime rt;
  auto model = digits_like_mlp(sgd());
  auto reference = digits_like_mlp(sgd());
  auto set = start(rt, model, {"cpu:0", "cpu:1"}, {.accumulation_steps = 2});
  auto bad = make_batch(16, 1);
  auto ids = bad.labels.to_vector<int64_t>();
  ids[12] = 10;  // row 4 of replica 1's 8 rows
  bad.labels = tensor::from_vector(ids);
  auto failed = set->train_on_batch({bad.images}, {bad.labels}, 0);
  REQUIRE_FALSE(failed);
  CHECK_THAT(failed.error_value().message, Catch::Contains("replica 1 of 2") && Catch::Contains("class id 10"));
  // The window's last batch is good, but the window failed: no replica applies it.
  const auto good = make_batch(16, 2);
  auto closing = set->train_on_batch({good.images}, {good.labels}, 0);
  REQUIRE_FALSE(closing);
  CHECK_THAT(closing.error_value().message, Catch::Contains("class id 10"));
  CHECK(model.updates_done() == 0);
  CHECK(weight_distance(model, reference) == 0.0);
  // The next window starts afresh, on every replica alike.
  const auto a = make_batch(16, 3), b = make_batch(16, 4);
  REQUIRE(set->train_on_batch({a.images}, {a.labels}, 0));
  REQUIRE(set->train_on_batch({b.images}, {b.labels}, 0));
  REQUIRE(reference.train_on_batch({concat({a.images, b.images}, 0).value()}, {concat({a.labels, b.labels}, 0).value()}, 0));
  CHECK(model.updates_done() == 1);
  CHECK(weight_distance(model, reference) <= 1e-5);
  CHECK_THAT(distribute::mirrored_strategy({"cpu:0"}, {.accumulation_steps = 0}).error_value().message,
             Catch::Contains("accumulation_steps must be at least 1"));
}

TEST_CASE("reducing gradients in bfloat16 ends near the f32 reduction", "[cpu][strategies]") {
  runtime rt;
  auto in_f32 = digits_like_mlp(sgd());
  auto in_bf16 = digits_like_mlp(sgd());
  auto f32_set = start(rt, in_f32, {"cpu:0", "cpu:1"}, {});
  auto bf16_set = start(rt, in_bf16, {"cpu:0", "cpu:1"}, {.bucket_bytes = 8192, .reduce_in_bf16 = true});
  double first_loss = 0, last_f32 = 0, last_bf16 = 0;
  for (uint64_t step = 0; step < 20; ++step) {
    const auto b = make_batch(64, 300 + step);
    auto r32 = f32_set->train_on_batch({b.images}, {b.labels}, 0);
    auto r16 = bf16_set->train_on_batch({b.images}, {b.labels}, 0);
    REQUIRE(r32);
    REQUIRE(r16);
    if (step == 0) first_loss = r32->loss;
    last_f32 = r32->loss, last_bf16 = r16->loss;
  }
  const double apart = weight_distance(in_bf16, in_f32);
  CHECK(apart > 0);      // the bf16 sums did round
  CHECK(apart <= 2e-2);  // 8 significant bits per gradient, 20 steps
  CHECK(last_f32 < first_loss);
  CHECK(last_bf16 == Approx(last_f32).epsilon(2e-2));
}
