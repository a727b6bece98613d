// early_stopping and model_checkpoint watching val_loss, as the README promises them: the weights
// after an early stop with restore_best_weights are the best epoch's, bit for bit, and
// save_best_only writes exactly the epochs that improved, each holding that epoch's weights.
//
// The scenario: three separable classes whose training labels turn wrong after a few epochs, so
// val_loss (on correct labels) falls, then rises, at a known place.

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../support/scratch_dir.hpp"
#include "actors/runtime.hpp"
#include "ops/random.hpp"
#include "ops/train/layers.hpp"
#include "serialization/saved_model.hpp"
#include "training/callbacks.hpp"

using namespace af;

namespace {

constexpr int64_t training_points = 96;
constexpr int good_epochs = 3;  ///< epochs trained on correct labels before they turn

/// `n` points of 3 classes (label i % 3), each class offset along its own axis.
data::dataset points(int64_t n, uint64_t seed) {
  auto x = random_normal({n, 4}, seed).value();
  std::vector<int64_t> labels(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 3;
    x.data<float>()[i * 4 + i % 3] += 3.0f;
  }
  return data::dataset::from_tensor_slices({{"x", x}, {"label", tensor::from_vector<int64_t>(labels)}});
}

/// Training batches whose labels are shifted by one class from epoch good_epochs + 1 on. The map
/// counts the elements it has seen, so the switch falls on an epoch boundary however far ahead
/// the pipeline reads.
data::dataset labels_turning_wrong() {
  auto seen = std::make_shared<std::atomic<int64_t>>(0);
  return points(training_points, 5)
      .map([seen](element e) -> expected<element> {
        if (seen->fetch_add(1) < training_points * good_epochs) return e;
        e.set("label", tensor::scalar<int64_t>((e.find("label")->item<int64_t>() + 1) % 3));
        return e;
      })
      .shuffle(training_points)
      .batch(8);
}

data::dataset validation_set() { return points(48, 9).batch(16); }

nn::model small_classifier() {
  auto m = nn::model::sequential(nn::input({4}, dtype::f32, "x"),
                                 {nn::dense(16, {.activation = "relu", .name = "hidden"}), nn::dense(3, {.name = "out"})},
                                 {.seed = 3});
  REQUIRE(m);
  REQUIRE(m->compile({.optimizer = optimizers::optimizer::adam({.learning_rate = 0.01}),
                      .loss = {nn::sparse_categorical_crossentropy()}}));
  return std::move(*m);
}

using weight_values = std::vector<std::vector<float>>;

weight_values copy_of(const std::vector<tensor>& weights) {
  weight_values out;
  for (const auto& w : weights) out.push_back(w.to_vector<float>());
  return out;
}

/// Copies of the weights at the end of every epoch, taken before the callbacks listed after it run.
class weights_per_epoch final : public train::callback {
 public:
  expected<void> on_epoch_end(train::fit_context& ctx, const train::logs&) override {
    epochs.push_back(copy_of(ctx.model->weight_values()));
    return {};
  }
  std::vector<weight_values> epochs;
};

/// Index of the first epoch with the lowest value: where a "min" monitor last improved.
std::size_t best_epoch(const std::vector<double>& values) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < values.size(); ++i)
    if (values[i] < values[best]) best = i;
  return best;
}

}  // namespace

TEST_CASE("early_stopping on val_loss with restore_best_weights leaves the best epoch's weights", "[trainer][callbacks]") {
  runtime rt;
  auto model = small_classifier();
  auto recorder = std::make_shared<weights_per_epoch>();
  const int patience = 2;
  auto h = train::fit(rt, model, labels_turning_wrong(),
                      {.epochs = 30,
                       .validation_data = validation_set(),
                       .callbacks = {recorder, train::early_stopping({.monitor = "val_loss", .patience = patience,
                                                                     .restore_best_weights = true})},
                       .verbose = train::verbosity::silent,
                       .seed = 1});
  REQUIRE(h);
  const auto val_loss = h->of("val_loss");
  INFO("val_loss per epoch: " << Catch::Detail::stringify(val_loss));
  const std::size_t best = best_epoch(val_loss);
  CHECK(best + 1 >= good_epochs);  // the scenario works: val_loss falls while the labels are right
  // It stopped `patience` epochs after the best, and the last epoch's weights were not the best.
  REQUIRE(h->epochs.size() == best + 1 + patience);
  REQUIRE(recorder->epochs.size() == h->epochs.size());
  REQUIRE(recorder->epochs.back() != recorder->epochs[best]);

  CHECK(copy_of(model.weight_values()) == recorder->epochs[best]);
  // The restored model scores what the best epoch scored.
  auto scores = train::evaluate(rt, model, validation_set());
  REQUIRE(scores);
  CHECK(*train::find_log(*scores, "loss") == Approx(val_loss[best]).epsilon(1e-6));
}

TEST_CASE("model_checkpoint on val_loss with save_best_only writes only the improving epochs, each with its weights",
          "[trainer][callbacks]") {
  testing::scratch_dir scratch{"af_best_only"};
  const std::string dir = scratch.file("ckpt");
  runtime rt;
  auto model = small_classifier();
  auto recorder = std::make_shared<weights_per_epoch>();
  auto h = train::fit(rt, model, labels_turning_wrong(),
                      {.epochs = good_epochs + 4,
                       .validation_data = validation_set(),
                       .callbacks = {recorder, train::model_checkpoint(dir, {.monitor = "val_loss", .save_best_only = true,
                                                                             .keep_last = 0})},
                       .verbose = train::verbosity::silent,
                       .seed = 1});
  REQUIRE(h);
  const auto val_loss = h->of("val_loss");
  INFO("val_loss per epoch: " << Catch::Detail::stringify(val_loss));
  std::set<std::string> improving;
  double lowest = std::numeric_limits<double>::infinity();
  for (std::size_t e = 0; e < val_loss.size(); ++e)
    if (val_loss[e] < lowest) {
      lowest = val_loss[e];
      improving.insert("ckpt-" + std::to_string(e + 1));
    }
  REQUIRE(improving.size() >= 2);
  REQUIRE(improving.size() < val_loss.size());  // some epochs did not improve: nothing written

  std::set<std::string> written;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) written.insert(entry.path().filename().string());
  CHECK(written == improving);

  for (const auto& name : written) {
    INFO(name);
    auto saved = ckpt::load(dir + "/" + name);
    REQUIRE(saved);
    const int epoch = std::stoi(*saved->meta("epoch"));
    CHECK("ckpt-" + std::to_string(epoch) == name);
    const auto& want = recorder->epochs[static_cast<std::size_t>(epoch - 1)];
    for (std::size_t i = 0; i < model.weights().size(); ++i) {
      const tensor* w = saved->find(model.weights()[i].name);
      REQUIRE(w != nullptr);
      CHECK(w->to_vector<float>() == want[i]);
    }
  }

  // The newest checkpoint is the best model: loaded into a fresh one, it scores the best val_loss.
  auto newest = ckpt::latest(dir);
  REQUIRE(newest);
  REQUIRE(newest->has_value());
  auto best = ckpt::load(**newest);
  REQUIRE(best);
  auto fresh = small_classifier();
  REQUIRE(fresh.load_state(best->tensors));
  auto scores = train::evaluate(rt, fresh, validation_set());
  REQUIRE(scores);
  CHECK(*train::find_log(*scores, "loss") == Approx(lowest).epsilon(1e-6));
}

TEST_CASE("model_checkpoint with saved_model writes version directories a server loads, keeping the newest",
          "[trainer][callbacks]") {
  testing::scratch_dir scratch{"af_export"};
  const std::string dir = scratch.file("exported");
  runtime rt;
  auto model = small_classifier();
  auto h = train::fit(rt, model, labels_turning_wrong(),
                      {.epochs = 4,
                       .callbacks = {train::model_checkpoint(dir, {.keep_last = 2, .saved_model = true})},
                       .verbose = train::verbosity::silent,
                       .seed = 1});
  REQUIRE(h);
  std::set<std::string> versions;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) versions.insert(entry.path().filename().string());
  CHECK(versions == std::set<std::string>{"3", "4"});
  auto served = saved_model::load(dir + "/4");
  REQUIRE(served);
  const tensor x = random_normal({5, model.input_specs()[0].dims[0]}, 8).value();
  auto live = model.predict_on_batch({x});
  auto loaded = served->call("serving_default", {x});
  REQUIRE(live);
  REQUIRE(loaded);
  CHECK((*loaded)[0].to_vector<float>() == (*live)[0].to_vector<float>());
}
