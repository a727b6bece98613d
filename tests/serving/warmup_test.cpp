// A version's warmup before it takes traffic (apps/serving/warmup.hpp): without recorded requests,
// one batch of zeros at every batch size the queue can form; a model that fails on them refuses
// the version.

#include <catch2/catch.hpp>

#include <mutex>
#include <set>

#include "../support/scratch_dir.hpp"
#include "actors/batching.hpp"
#include "actors/runtime.hpp"
#include "apps/serving/warmup.hpp"

using namespace af;
using namespace af::serving;

namespace {

graph::signature one_input() {
  return {"serving_default", "f", {{"x", {dtype::f32, {-1, 3}}}}, {{"y", {dtype::f32, {-1, 3}}}}, {}};
}

// Records the rows of every batch it runs, and their values' sum.
struct recording_model {
  std::mutex mtx;
  std::multiset<int64_t> batch_rows;
  double sum = 0;
  bool fail = false;

  expected<std::vector<tensor>> operator()(const std::vector<tensor>& in) {
    std::lock_guard<std::mutex> guard{mtx};
    batch_rows.insert(in[0].shape()[0]);
    for (float v : in[0].to_vector<float>()) sum += v;
    if (fail) return make_error(errc::invalid_argument, "the model refuses this batch");
    return std::vector<tensor>{in[0]};
  }
};

}  // namespace

TEST_CASE("without recorded requests, warmup runs zeros at every batch size the queue forms", "[serving][warmup]") {
  runtime rt{{.scheduler_threads = 2}};
  testing::scratch_dir dir{"af_warmup"};
  auto model = std::make_shared<recording_model>();
  const batching_options options{.max_batch_size = 16, .allowed_batch_sizes = {4, 8, 16}};
  const auto sig = one_input();
  auto q = batching_queue::start(rt, [model](const std::vector<tensor>& in) { return (*model)(in); }, options, sig.inputs);
  REQUIRE(q);
  REQUIRE(warm_up(dir.path.string(), sig, *q, options));
  std::lock_guard<std::mutex> guard{model->mtx};
  // 1 is padded to the first allowed size, 4; then 4, 8 and 16 themselves.
  CHECK(std::set<int64_t>(model->batch_rows.begin(), model->batch_rows.end()) == std::set<int64_t>{4, 8, 16});
  CHECK(model->sum == 0);
}

TEST_CASE("a model that fails on its warmup batches refuses the version, naming the problem", "[serving][warmup]") {
  runtime rt{{.scheduler_threads = 2}};
  testing::scratch_dir dir{"af_warmup"};
  auto model = std::make_shared<recording_model>();
  model->fail = true;
  const batching_options options{.max_batch_size = 8};
  const auto sig = one_input();
  auto q = batching_queue::start(rt, [model](const std::vector<tensor>& in) { return (*model)(in); }, options, sig.inputs);
  REQUIRE(q);
  auto warmed = warm_up(dir.path.string(), sig, *q, options);
  REQUIRE_FALSE(warmed);
  CHECK_THAT(warmed.error_value().message, Catch::Contains("the model refuses this batch"));
}
