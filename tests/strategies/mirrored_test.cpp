// mirrored_strategy: replicas in one process end where one replica given the same global batches
// does, for the digits MLP and CNN (without their dropout, whose masks each replica draws for its
// own rows); uneven and tiny global batches; a bad slice fails the step naming its replica and
// changes no replica; fit with a strategy equals fit without.

#include <catch2/catch.hpp>

#include <cmath>

#include "actors/runtime.hpp"
#include "ops/parallel.hpp"
#include "ops/random.hpp"
#include "ops/train/layers.hpp"
#include "strategies/strategy.hpp"
#include "training/trainer.hpp"

#include "digits_like.hpp"

using namespace af;
using namespace af::testing;

namespace {

bool same_weights(const nn::model& a, const nn::model& b) {
  for (std::size_t i = 0; i < a.weight_values().size(); ++i)
    if (a.weight_values()[i].to_vector<float>() != b.weight_values()[i].to_vector<float>()) return false;
  return true;
}

/// `steps` updates of `model` through `replicas` replicas (1: train_on_batch itself) on the same
/// global batches; the losses it reported.
std::vector<double> train_steps(runtime& rt, nn::model& model, int replicas, const std::vector<int64_t>& rows_per_step,
                                distribute::mirrored_options options = {}) {
  std::vector<double> losses;
  std::unique_ptr<distribute::replica_set> set;
  if (replicas > 1) {
    std::vector<std::string> devices;
    for (int r = 0; r < replicas; ++r) devices.push_back("cpu:" + std::to_string(r));
    auto s = distribute::mirrored_strategy(devices, options);
    REQUIRE(s);
    auto started = (*s)->start(rt, model);
    REQUIRE(started);
    set = std::move(*started);
  }
  for (std::size_t step = 0; step < rows_per_step.size(); ++step) {
    const auto b = make_batch(rows_per_step[step], 100 + step);
    auto r = set ? set->train_on_batch({b.images}, {b.labels}, 0) : model.train_on_batch({b.images}, {b.labels}, 0);
    REQUIRE(r);
    losses.push_back(r->loss);
    CHECK(r->predictions[0].dim(0) == rows_per_step[step]);
  }
  return losses;
}

}  // namespace

TEST_CASE("2 and 4 replicas end with the weights of one replica given the same global batches", "[cpu][strategies]") {
  runtime rt;
  const std::vector<int64_t> twenty_steps(20, 64);
  const bool cnn = GENERATE(false, true);
  const int replicas = GENERATE(2, 3, 4);  // 3: the ring alone (recursive doubling needs a power of two)
  // One bucket, or a bucket per few weights reduced while the backward pass goes on, or after it.
  const std::size_t bucket_bytes = GENERATE(std::size_t{25} << 20, std::size_t{4096});
  const bool overlap = GENERATE(true, false);
  INFO((cnn ? "CNN" : "MLP") << " on " << replicas << " replicas, buckets of " << bucket_bytes << " bytes, overlap " << overlap);
  // The CNN trains with SGD: Adam divides each gradient by its own running magnitude, so a gradient
  // that is zero up to rounding on one side and exactly zero on the other (the replicas sum in
  // another order than one replica does) moves its weight by a whole learning rate; over 20 steps
  // that put a CNN bias 1e-2 apart with 4 KB buckets (one step of SGD: 1e-8 apart).
  auto make = [&] {
    return cnn ? digits_like_cnn(optimizers::optimizer::sgd({.learning_rate = 0.05, .momentum = 0.9}))
               : digits_like_mlp(optimizers::optimizer::adam({.learning_rate = 0.001}));
  };
  auto one = make();
  auto many = make();
  const auto losses_one = train_steps(rt, one, 1, twenty_steps);
  const auto losses_many = train_steps(rt, many, replicas, twenty_steps, {.bucket_bytes = bucket_bytes, .overlap = overlap});
  CHECK(weight_distance(many, one) <= 1e-5);
  CHECK(weight_distance(one, make()) > 1e-3);  // the steps did move the weights
  for (std::size_t s = 0; s < losses_one.size(); ++s) CHECK(losses_many[s] == Approx(losses_one[s]).epsilon(1e-5));
  CHECK(many.updates_done() == 20);
}

TEST_CASE("a global batch that does not divide evenly, or is smaller than the group, still equals one replica", "[cpu][strategies]") {
  runtime rt;
  auto one = digits_like_mlp(optimizers::optimizer::adam({.learning_rate = 0.01}));
  auto four = digits_like_mlp(optimizers::optimizer::adam({.learning_rate = 0.01}));
  const std::vector<int64_t> rows{7, 3, 64, 1, 33};  // 2+2+2+1; 1+1+1+0; 16 each; 1+0+0+0; 9+8+8+8
  train_steps(rt, one, 1, rows);
  train_steps(rt, four, 4, rows);
  CHECK(weight_distance(four, one) <= 1e-5);
  CHECK(distribute::split_rows(7, 4) == std::vector<int64_t>{2, 2, 2, 1});
  CHECK(distribute::split_rows(3, 4) == std::vector<int64_t>{1, 1, 1, 0});
}

TEST_CASE("a bad slice fails the step naming its replica, and no replica applies the update", "[cpu][strategies]") {
  runtime rt;
  auto model = digits_like_mlp(optimizers::optimizer::sgd({.learning_rate = 0.1}));
  auto reference = digits_like_mlp(optimizers::optimizer::sgd({.learning_rate = 0.1}));
  auto s = distribute::mirrored_strategy({"cpu:0", "cpu:1"}).value();
  auto set = s->start(rt, model).value();

  auto good = make_batch(16, 1);
  REQUIRE(set->train_on_batch({good.images}, {good.labels}, 0));
  REQUIRE(reference.train_on_batch({good.images}, {good.labels}, 0));

  auto bad = make_batch(16, 2);
  auto ids = bad.labels.to_vector<int64_t>();
  ids[12] = 10;  // row 4 of replica 1's slice of 8 rows
  bad.labels = tensor::from_vector(ids);
  auto failed = set->train_on_batch({bad.images}, {bad.labels}, 0);
  REQUIRE_FALSE(failed);
  CHECK(failed.error_value().code == errc::out_of_range);
  CHECK_THAT(failed.error_value().message, Catch::Contains("replica 1 of 2"));
  CHECK_THAT(failed.error_value().message, Catch::Contains("class id 10"));
  CHECK(model.updates_done() == 1);
  CHECK(weight_distance(model, reference) <= 1e-6);  // replica 0 as it was; the next step shows replica 1 was too

  // Targets that do not have the batch's rows are refused before any replica steps.
  auto short_targets = set->train_on_batch({good.images}, {tensor::from_vector<int64_t>({1, 2, 3})}, 0);
  REQUIRE_FALSE(short_targets);
  CHECK_THAT(short_targets.error_value().message, Catch::Contains("the batch's 16 rows"));
  CHECK(model.updates_done() == 1);

  // The group goes on in step: the next good batch lands where one replica's does.
  auto next = make_batch(16, 3);
  REQUIRE(set->train_on_batch({next.images}, {next.labels}, 0));
  REQUIRE(reference.train_on_batch({next.images}, {next.labels}, 0));
  CHECK(weight_distance(model, reference) <= 1e-5);
}

TEST_CASE("fit with a mirrored strategy ends where fit without one does", "[cpu][strategies]") {
  runtime rt;
  auto x = random_uniform({200, 8, 8, 1}, 11).value();
  std::vector<int64_t> labels(200);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  const auto data = data::dataset::from_tensor_slices({{"image", x}, {"label", tensor::from_vector(labels)}}).batch(32);

  auto alone = digits_like_mlp(optimizers::optimizer::sgd({.learning_rate = 0.05, .momentum = 0.9}));
  auto mirrored = digits_like_mlp(optimizers::optimizer::sgd({.learning_rate = 0.05, .momentum = 0.9}));
  auto h1 = train::fit(rt, alone, data, {.epochs = 3, .verbose = train::verbosity::silent});
  REQUIRE(h1);
  auto strategy = distribute::mirrored_strategy({"cpu:0", "cpu:1"}).value();
  CHECK(strategy->replicas_in_sync() == 2);
  CHECK(strategy->describe() == "mirrored(cpu:0, cpu:1)");
  auto h2 = train::fit(rt, mirrored, data, {.epochs = 3, .verbose = train::verbosity::silent, .strategy = strategy});
  REQUIRE(h2);
  CHECK(weight_distance(mirrored, alone) <= 1e-5);
  CHECK(h2->of("loss").back() == Approx(h1->of("loss").back()).epsilon(1e-5));
  CHECK(h2->of("accuracy") == h1->of("accuracy"));
  CHECK(mirrored.updates_done() == alone.updates_done());
}

TEST_CASE("fit with a mirrored strategy stops on a bad batch naming the epoch, the batch and the replica", "[cpu][strategies]") {
  runtime rt;
  auto x = random_uniform({64, 8, 8, 1}, 12).value();
  std::vector<int64_t> labels(64, 1);
  labels[50] = -1;  // batch 2, row 18: replica 1's row 2
  const auto data = data::dataset::from_tensor_slices({{"image", x}, {"label", tensor::from_vector(labels)}}).batch(32);
  auto model = digits_like_mlp(optimizers::optimizer::sgd());
  auto before = model.clone().value();
  auto r = train::fit(rt, model, data, {.verbose = train::verbosity::silent, .strategy = distribute::mirrored_strategy({"cpu:0", "cpu:1"}).value()});
  REQUIRE_FALSE(r);
  INFO(r.error_value().message);
  CHECK_THAT(r.error_value().message, Catch::Contains("epoch 1/1, batch 2"));
  CHECK_THAT(r.error_value().message,
             Catch::Contains("mirrored(cpu:0, cpu:1): replica 1 of 2, step 2: target row 2: class id -1 is outside [0, 10)"));
  CHECK(model.updates_done() == 1);
  CHECK_FALSE(same_weights(model, before));
}

TEST_CASE("mirrored_strategy names the device it cannot use", "[cpu][strategies]") {
  auto none = distribute::mirrored_strategy({});
  REQUIRE_FALSE(none);
  CHECK_THAT(none.error_value().message, Catch::Contains("no devices"));
  auto twice = distribute::mirrored_strategy({"cpu:0", "cpu:0"});
  REQUIRE_FALSE(twice);
  CHECK_THAT(twice.error_value().message, Catch::Contains("'cpu:0' is named twice"));
  auto gpu = distribute::mirrored_strategy({"gpu:0"});
  REQUIRE_FALSE(gpu);
  CHECK(gpu.error_value().code == errc::unsupported);
  auto odd = distribute::mirrored_strategy({"cpu:x"});
  REQUIRE_FALSE(odd);
  CHECK_THAT(odd.error_value().message, Catch::Contains("'cpu:x'"));
  CHECK(distribute::default_strategy()->replicas_in_sync() == 1);
}

TEST_CASE("a thread share caps the kernel threads of the thread that holds it", "[cpu][strategies]") {
  const int before = thread_budget();
  {
    scoped_thread_share one{1};
    CHECK(thread_budget() == 1);
    {
      scoped_thread_share more{before + 8};
      CHECK(thread_budget() == before);  // never above the budget
    }
    CHECK(thread_budget() == 1);
  }
  CHECK(thread_budget() == before);
}

TEST_CASE("replicas are stepped on a runtime with a single scheduler worker", "[cpu][strategies]") {
  runtime rt{{.scheduler_threads = 1}};
  auto one = digits_like_mlp(optimizers::optimizer::sgd({.learning_rate = 0.1}));
  auto two = digits_like_mlp(optimizers::optimizer::sgd({.learning_rate = 0.1}));
  const auto data = data::dataset::from_tensor_slices({{"image", random_uniform({40, 8, 8, 1}, 4).value()},
                                                       {"label", tensor::from_vector(std::vector<int64_t>(40, 3))}})
                        .batch(20);
  REQUIRE(train::fit(rt, one, data, {.verbose = train::verbosity::silent}));
  REQUIRE(train::fit(rt, two, data, {.verbose = train::verbosity::silent, .strategy = distribute::mirrored_strategy({"cpu:0", "cpu:1"}).value()}));
  CHECK(weight_distance(two, one) <= 1e-5);
}
