// One executor: every graph runs on a device actor. Training, evaluation and prediction (fit's and
// the model's own), mirrored replicas, af::function, a SavedModel signature and a served batch are
// each driven here, and graph::interpret must not have run on any thread outside a device actor.
// The counter that says so is checked first to count what it should.

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../strategies/digits_like.hpp"
#include "../support/scratch_dir.hpp"
#include "../support/skip.hpp"
#include "actors/batching.hpp"
#include "actors/runtime.hpp"
#include "ops/allocator.hpp"
#include "ops/runtime/executor.hpp"
#include "ops/runtime/function.hpp"
#include "serialization/saved_model.hpp"
#include "strategies/strategy.hpp"
#include "training/trainer.hpp"

using namespace af;

namespace {

function scaled_sum() {
  return function{[](const std::vector<sym>& in) { return std::vector<sym>{in[0] * in[1] + in[0]}; }};
}

data::dataset digits_like_batches(int64_t rows, int64_t batch) {
  const auto b = testing::make_batch(rows, 21);
  return data::dataset::from_tensor_slices({{"image", b.images}, {"label", b.labels}}).batch(static_cast<std::size_t>(batch));
}

}  // namespace

TEST_CASE("without a runtime a graph runs on the calling thread and counts as outside a device actor", "[executor]") {
  const auto before = executor_statistics();
  auto f = scaled_sum();
  auto out = f({tensor::from_vector<float>({1, 2}), tensor::from_vector<float>({3, 4})});
  REQUIRE(out);
  CHECK(out->front().to_vector<float>() == std::vector<float>{4, 10});
  const auto after = executor_statistics();
  CHECK(after.without_runtime == before.without_runtime + 1);
  CHECK(after.interpreted_outside_device_actor == before.interpreted_outside_device_actor + 1);
}

TEST_CASE("with a runtime, af::function called from a plain thread runs on the runtime's device actor", "[executor]") {
  runtime rt;
  auto f = scaled_sum();
  const auto before = executor_statistics();
  std::thread::id ran_on;
  auto out = f.call({tensor::from_vector<float>({1, 2}), tensor::from_vector<float>({3, 4})},
                    [&](std::size_t, const tensor&) { ran_on = std::this_thread::get_id(); });
  REQUIRE(out);
  CHECK(out->front().to_vector<float>() == std::vector<float>{4, 10});
  CHECK(ran_on != std::this_thread::get_id());  // the device actor's thread computed it
  const auto after = executor_statistics();
  CHECK(after.requested == before.requested + 1);
  CHECK(after.in_device_actor == before.in_device_actor + 1);
  CHECK(after.interpreted_outside_device_actor == before.interpreted_outside_device_actor);
  // The graph's error comes back to the caller, naming the argument.
  auto wrong = f({tensor::from_vector<float>({1, 2}), tensor::from_vector<int64_t>({3, 4})});
  CHECK_FALSE(wrong);
}

TEST_CASE("graphs asked from two plain threads at once run at once, on two of the runtime's device actors", "[executor]") {
  if (std::thread::hardware_concurrency() < 2) AF_SKIP("one core: the runtime has one device actor for requests");
  runtime rt;
  auto f = scaled_sum();
  const std::vector<tensor> args{tensor::from_vector<float>({1, 2}), tensor::from_vector<float>({3, 4})};
  REQUIRE(f(args));  // traced once, before the threads
  std::mutex mtx;
  std::condition_variable arrived;
  int inside = 0;
  bool met[2] = {false, false};
  std::thread::id ran_on[2];
  auto call = [&](int who) {
    (void)f.call(args, [&](std::size_t, const tensor&) {
      std::unique_lock<std::mutex> lock{mtx};
      ran_on[who] = std::this_thread::get_id();
      ++inside;
      arrived.notify_all();
      // Each waits inside its graph for the other: one device actor for both would never let it in.
      met[who] = arrived.wait_for(lock, std::chrono::seconds(20), [&] { return inside == 2; });
    });
  };
  std::thread first{call, 0}, second{call, 1};
  first.join();
  second.join();
  CHECK(met[0]);
  CHECK(met[1]);
  CHECK(ran_on[0] != ran_on[1]);
}

TEST_CASE("a request to the device actor keeps the caller's allocator scope and its limit", "[executor]") {
  runtime rt;
  auto small = make_cpu_allocator({.memory_limit = 4096, .name = "small"}).value();
  auto f = function{[](const std::vector<sym>& in) { return std::vector<sym>{in[0] * in[0] + in[0]}; }};
  const auto big = tensor::from_vector<float>(std::vector<float>(100000, 1.0f));
  {
    allocator_scope scope{small};
    auto out = f({big});
    REQUIRE_FALSE(out);
    CHECK(out.error_value().code == errc::out_of_memory);
  }
  CHECK(f({big}));  // outside the scope, the default allocator holds it
}

TEST_CASE("no graph runs outside a device actor: fit, evaluate, predict, mirrored replicas, model steps, SavedModel and a served batch",
          "[executor]") {
  runtime rt;
  const uint64_t outside_before = executor_statistics().interpreted_outside_device_actor;
  const uint64_t inside_before = executor_statistics().in_device_actor;

  auto model = testing::digits_like_mlp(optimizers::optimizer::adam({.learning_rate = 0.01}));
  const auto ds = digits_like_batches(64, 16);
  REQUIRE(train::fit(rt, model, ds, {.epochs = 1, .verbose = train::verbosity::silent, .seed = 3}));
  REQUIRE(train::evaluate(rt, model, ds, {.verbose = train::verbosity::silent}));
  REQUIRE(train::predict(rt, model, ds.map([](element e) -> expected<element> {
    std::erase_if(e.fields, [](const named_tensor& f) { return f.name == "label"; });
    return e;
  })));

  auto mirrored = testing::digits_like_mlp(optimizers::optimizer::adam({.learning_rate = 0.01}));
  auto strategy = distribute::mirrored_strategy({"cpu:0", "cpu:1"}).value();
  REQUIRE(train::fit(rt, mirrored, ds, {.epochs = 1, .verbose = train::verbosity::silent, .seed = 3, .out = stdout, .strategy = strategy}));

  // The model's own steps, from this (plain) thread.
  const auto b = testing::make_batch(8, 4);
  REQUIRE(model.train_on_batch({b.images}, {b.labels}, 1));
  REQUIRE(model.test_on_batch({b.images}, {b.labels}));
  REQUIRE(model.predict_on_batch({b.images}));

  testing::scratch_dir dir{"af_one_executor"};
  const std::string saved = (dir.path / "model").string();
  auto written = saved_model::save(model, saved);
  INFO((written ? std::string{} : written.error_value().message));
  REQUIRE(written);
  auto loaded = saved_model::load(saved);
  REQUIRE(loaded);
  const std::string signature = loaded->signatures().front().name;
  REQUIRE(loaded->call(signature, std::vector<tensor>{b.images}));

  const auto spec = loaded->signatures().front().inputs;
  auto served = serving::batching_queue::start(
      rt, [&](const std::vector<tensor>& in) { return loaded->call(signature, in); }, {.max_batch_size = 8}, spec);
  REQUIRE(served);
  REQUIRE(served->predict({b.images}));

  const auto after = executor_statistics();
  CHECK(after.interpreted_outside_device_actor == outside_before);
  // fit's batches, the evaluation's, the prediction's, the replicas' steps and the direct calls.
  CHECK(after.in_device_actor >= inside_before + 4 + 4 + 4 + 4 + 3 + 2);
}
