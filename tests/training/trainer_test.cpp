// fit/evaluate/predict on dataset pipelines: accuracy on the digits, exact continuation after a
// crash (BackupAndRestore), errors that name the batch, and the callbacks' files.

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "../support/eventually.hpp"
#include "../support/scratch_dir.hpp"
#include "actors/runtime.hpp"
#include "ops/random.hpp"
#include "ops/train/layers.hpp"
#include "serialization/digits.hpp"
#include "serialization/tfevents.hpp"
#include "training/callbacks.hpp"
#include "training/digits.hpp"

using namespace af;

namespace {

/// The digits converted once per test run; nullptr when python3-sklearn's copy is absent.
const std::string* digits_dir() {
  static const std::optional<std::string> dir = []() -> std::optional<std::string> {
    auto csv = digits::find_sklearn_digits_csv();
    if (!csv) return std::nullopt;
    auto data = digits::read_digits_csv(*csv);
    if (!data) return std::nullopt;
    static testing::scratch_dir scratch{"af_digits"};
    if (!digits::write_digits_tfrecords(*data, scratch.path.string())) return std::nullopt;
    return scratch.path.string();
  }();
  return dir ? &*dir : nullptr;
}

/// A small classification set in memory: 3 separable classes of 4 features, batched.
data::dataset blobs(int64_t n, int64_t batch, bool shuffle) {
  auto x = random_normal({n, 4}, 5).value();
  std::vector<int64_t> labels(static_cast<std::size_t>(n));
  auto* px = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 3;
    px[i * 4 + i % 3] += 3.0f;
  }
  auto ds = data::dataset::from_tensor_slices({{"x", x}, {"label", tensor::from_vector<int64_t>(labels)}});
  if (shuffle) ds = ds.shuffle(static_cast<std::size_t>(n));
  return ds.batch(static_cast<std::size_t>(batch));
}

nn::model blob_model(uint64_t seed) {
  auto m = nn::model::sequential(nn::input({4}, dtype::f32, "x"),
                                 {nn::dense(16, {.activation = "relu", .name = "h"}), nn::dropout(0.2, "d"), nn::dense(3, {.name = "o"})},
                                 {.seed = seed});
  REQUIRE(m);
  REQUIRE(m->compile({.optimizer = optimizers::optimizer::adam({.learning_rate = 0.01}),
                      .loss = {nn::sparse_categorical_crossentropy()},
                      .metrics = {"accuracy"}}));
  return std::move(*m);
}

/// Fails fit at a given batch of a given epoch, as a crash would stop it.
class crash_at final : public train::callback {
 public:
  crash_at(int epoch, int64_t batch) : epoch_(epoch), batch_(batch) {}
  expected<void> on_batch_end(train::fit_context& ctx, const train::logs&) override {
    if (ctx.epoch == epoch_ && ctx.batch_in_epoch == batch_) return make_error(errc::cancelled, "simulated crash");
    return {};
  }

 private:
  int epoch_;
  int64_t batch_;
};

double fit_digits(nn::model& m, int epochs, double learning_rate) {
  const std::string* dir = digits_dir();
  runtime rt;
  auto train_set = train::digits_dataset(*dir + "/train.tfrecord", 32, true);
  auto test_set = train::digits_dataset(*dir + "/test.tfrecord", 128, false);
  REQUIRE(m.compile({.optimizer = optimizers::optimizer::adam({.learning_rate = learning_rate}),
                     .learning_rate = schedules::cosine_decay(learning_rate, epochs * 45),
                     .loss = {nn::sparse_categorical_crossentropy()},
                     .metrics = {"accuracy"}}));
  auto history = train::fit(rt, m, train_set, {.epochs = epochs, .verbose = train::verbosity::silent, .seed = 3});
  REQUIRE(history);
  auto result = train::evaluate(rt, m, test_set);
  REQUIRE(result);
  return *train::find_log(*result, "accuracy");
}

}  // namespace

TEST_CASE("an MLP reaches 95 percent test accuracy on the digits", "[trainer][digits]") {
  // scripts/setup installs python3-sklearn: without its data set this test fails, it does not pass.
  if (!digits_dir()) FAIL("python3-sklearn's digits.csv.gz is absent or unreadable: run scripts/setup");
  auto m = train::digits_mlp(1);
  REQUIRE(m);
  const double accuracy = fit_digits(*m, 15, 3e-3);
  INFO("test accuracy " << accuracy);
  CHECK(accuracy >= 0.95);
}

TEST_CASE("a small CNN reaches 97 percent test accuracy on the digits", "[trainer][digits]") {
  // scripts/setup installs python3-sklearn: without its data set this test fails, it does not pass.
  if (!digits_dir()) FAIL("python3-sklearn's digits.csv.gz is absent or unreadable: run scripts/setup");
  auto m = train::digits_cnn(1);
  REQUIRE(m);
  const double accuracy = fit_digits(*m, 12, 3e-3);
  INFO("test accuracy " << accuracy);
  CHECK(accuracy >= 0.97);
}

TEST_CASE("fit continued from a backup after a crash equals uninterrupted training", "[trainer]") {
  testing::scratch_dir scratch{"af_backup"};
  const std::string backup = scratch.file("backup");
  runtime rt;
  auto ds = blobs(96, 8, /*shuffle=*/true);  // an unseeded shuffle: fit seeds it per epoch

  auto uninterrupted = blob_model(4);
  REQUIRE(train::fit(rt, uninterrupted, ds, {.epochs = 3, .verbose = train::verbosity::silent, .seed = 11}));

  auto crashed = blob_model(4);
  auto first = train::fit(rt, crashed, ds,
                          {.epochs = 3,
                           .callbacks = {train::backup_and_restore(backup, 5), std::make_shared<crash_at>(1, 7)},
                           .verbose = train::verbosity::silent,
                           .seed = 11});
  REQUIRE_FALSE(first);
  CHECK(first.error_value().message.find("simulated crash") != std::string::npos);
  REQUIRE(std::filesystem::exists(backup));

  // A new process: a fresh model, the same fit call; the backup (epoch 2, batch 5) takes over.
  auto resumed = blob_model(4);
  auto second = train::fit(rt, resumed, ds,
                           {.epochs = 3, .callbacks = {train::backup_and_restore(backup, 5)}, .verbose = train::verbosity::silent, .seed = 11});
  REQUIRE(second);
  CHECK(second->epochs.size() == 2);  // the second and third epochs
  CHECK(resumed.updates_done() == uninterrupted.updates_done());
  for (std::size_t i = 0; i < resumed.weight_values().size(); ++i)
    CHECK(resumed.weight_values()[i].to_vector<float>() == uninterrupted.weight_values()[i].to_vector<float>());
  CHECK_FALSE(std::filesystem::exists(backup));  // removed once fit completed
}

TEST_CASE("a mid-epoch backup restores the pipeline's state instead of replaying the epoch", "[trainer]") {
  // Rows pass a counting map before an epoch-wide shuffle: a restore that replayed would map the
  // crashed epoch's rows again; one from the stages' state maps only the epochs after it.
  const int64_t rows = 96;
  auto x = random_normal({rows, 4}, 5).value();
  std::vector<int64_t> labels(static_cast<std::size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 3;
    x.data<float>()[i * 4 + i % 3] += 3.0f;
  }
  auto mapped = std::make_shared<std::atomic<int64_t>>(0);
  const auto parallelism = GENERATE(1, 2);  // a source stage, then a chain of stage actors per pass
  INFO("map parallelism " << parallelism);
  auto ds = data::dataset::from_tensor_slices({{"x", x}, {"label", tensor::from_vector<int64_t>(labels)}})
                .map([mapped](element e) -> expected<element> {
                  mapped->fetch_add(1);
                  return e;
                }, parallelism)
                .shuffle(static_cast<std::size_t>(rows))
                .batch(8);
  testing::scratch_dir scratch{"af_backup_state"};
  const std::string backup = scratch.file("backup");
  runtime rt;
  const train::fit_options plain{.epochs = 3, .verbose = train::verbosity::silent, .seed = 7};

  auto uninterrupted = blob_model(2);
  REQUIRE(train::fit(rt, uninterrupted, ds, plain));

  auto crashed = blob_model(2);
  auto with_crash = plain;
  with_crash.callbacks = {train::backup_and_restore(backup, 5), std::make_shared<crash_at>(1, 7)};
  REQUIRE_FALSE(train::fit(rt, crashed, ds, with_crash));

  mapped->store(0);
  auto restored = blob_model(2);
  auto resumed = plain;
  resumed.callbacks = {train::backup_and_restore(backup, 5)};
  auto h = train::fit(rt, restored, ds, resumed);
  REQUIRE(h);
  CHECK(h->epochs.size() == 2);
  // Epoch 2 maps its 96 rows; epoch 1's were all in the saved shuffle buffer (a replay: 96 more).
  CHECK(mapped->load() <= rows);
  CHECK(restored.updates_done() == uninterrupted.updates_done());
  for (std::size_t i = 0; i < restored.weight_values().size(); ++i)
    CHECK(restored.weight_values()[i].to_vector<float>() == uninterrupted.weight_values()[i].to_vector<float>());
}

TEST_CASE("fit stops on a bad batch naming the epoch, the batch and the problem", "[trainer]") {
  runtime rt;
  auto m = blob_model(1);
  auto x = random_normal({12, 4}, 1).value();
  SECTION("a class id out of range") {
    auto ds = data::dataset::from_tensor_slices(
                  {{"x", x}, {"label", tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 7, 2, 0, 1, 2})}})
                  .batch(4);
    auto r = train::fit(rt, m, ds, {.epochs = 1, .verbose = train::verbosity::silent});
    REQUIRE_FALSE(r);
    INFO(r.error_value().message);
    CHECK(r.error_value().message.find("epoch 1/1, batch 2") != std::string::npos);
    CHECK(r.error_value().message.find("class id 7 is outside [0, 3)") != std::string::npos);
    CHECK(m.updates_done() == 1);  // the first batch stays learned
  }
  SECTION("a shape the model does not take") {
    auto ds = data::dataset::from_tensor_slices({{"x", random_normal({8, 5}, 1).value()}, {"label", tensor::zeros({8}, dtype::i64).value()}}).batch(4);
    auto r = train::fit(rt, m, ds, {.epochs = 1, .verbose = train::verbosity::silent});
    REQUIRE_FALSE(r);
    CHECK(r.error_value().message.find("batch 1: input 'x' must be f32[4,4], got f32[4,5]") != std::string::npos);
  }
  SECTION("a missing target field") {
    auto ds = data::dataset::from_tensor_slices({{"x", x}, {"y", tensor::zeros({12}, dtype::i64).value()}}).batch(4);
    auto r = train::fit(rt, m, ds, {.epochs = 1, .verbose = train::verbosity::silent});
    REQUIRE_FALSE(r);
    CHECK(r.error_value().message.find("no field 'label' for a target (it has: x, y)") != std::string::npos);
  }
  SECTION("an empty dataset") {
    auto ds = data::dataset::from_tensor_slices({{"x", x}, {"label", tensor::zeros({12}, dtype::i64).value()}}).take(0).batch(4);
    auto r = train::fit(rt, m, ds, {.epochs = 2, .verbose = train::verbosity::silent});
    REQUIRE_FALSE(r);
    CHECK(r.error_value().message == "fit: epoch 1/2: the training dataset gave no batches");
  }
  SECTION("a NaN loss") {
    auto bad = x.contiguous().value();
    bad.data<float>()[4 * 9] = std::nanf("");
    auto ds = data::dataset::from_tensor_slices({{"x", bad}, {"label", tensor::zeros({12}, dtype::i64).value()}}).batch(4);
    auto r = train::fit(rt, m, ds, {.epochs = 1, .verbose = train::verbosity::silent});
    REQUIRE_FALSE(r);
    CHECK(r.error_value().message.find("batch 3: the loss is NaN") != std::string::npos);
    CHECK(m.updates_done() == 2);
  }
}

TEST_CASE("callbacks write CSV rows, TensorBoard scalars and checkpoints, and stop early", "[trainer]") {
  testing::scratch_dir scratch{"af_callbacks"};
  runtime rt;
  auto m = blob_model(2);
  auto train_set = blobs(60, 10, true);
  auto val_set = blobs(30, 10, false);
  std::vector<double> rates;
  auto h = train::fit(rt, m, train_set,
                      {.epochs = 4,
                       .validation_data = val_set,
                       .callbacks = {train::csv_logger(scratch.file("log.csv")), train::tensorboard(scratch.file("tb")),
                                     train::model_checkpoint(scratch.file("ckpt"), {.keep_last = 2}),
                                     train::learning_rate_scheduler([&](int epoch, double) {
                                       rates.push_back(0.01 / (epoch + 1));
                                       return rates.back();
                                     })},
                       .verbose = train::verbosity::silent});
  REQUIRE(h);
  REQUIRE(h->epochs.size() == 4);
  CHECK(h->of("val_accuracy").size() == 4);
  CHECK(m.learning_rate() == Approx(0.01 / 4));

  std::ifstream csv{scratch.file("log.csv")};
  std::string header, line;
  std::getline(csv, header);
  CHECK(header == "epoch,loss,accuracy,val_loss,val_accuracy");
  int rows = 0;
  while (std::getline(csv, line)) CHECK(line.rfind(std::to_string(rows++) + ",", 0) == 0);
  CHECK(rows == 4);

  std::vector<std::string> event_files;
  for (const auto& e : std::filesystem::directory_iterator(scratch.file("tb") + "/validation")) event_files.push_back(e.path().string());
  REQUIRE(event_files.size() == 1);
  auto scalars = tfevents::read_scalars(event_files[0]);
  REQUIRE(scalars);
  REQUIRE(scalars->size() == 8);  // epoch_loss and epoch_accuracy, four epochs
  CHECK((*scalars)[0].tag == "epoch_loss");
  CHECK((*scalars)[0].value == Approx(h->epochs[0][2].second));
  CHECK((*scalars)[7].step == 3);

  auto newest = ckpt::latest(scratch.file("ckpt"));
  REQUIRE(newest);
  REQUIRE(newest->has_value());
  CHECK(std::filesystem::path(**newest).filename() == "ckpt-4");
  auto saved = ckpt::load(**newest);
  REQUIRE(saved);
  CHECK(*saved->meta("epoch") == "4");
  CHECK(saved->find("h/kernel") != nullptr);
  CHECK(saved->find("optimizer/h/kernel/slot_1") != nullptr);

  // Early stopping on a figure that cannot improve after the first epoch.
  auto stopper = blob_model(3);
  auto stopped = train::fit(rt, stopper, train_set,
                            {.epochs = 20,
                             .callbacks = {train::early_stopping({.monitor = "loss", .min_delta = 1e9, .patience = 2})},
                             .verbose = train::verbosity::silent});
  REQUIRE(stopped);
  CHECK(stopped->epochs.size() == 3);
}

TEST_CASE("fit prints one line per epoch when the output is not a terminal", "[trainer]") {
  runtime rt;
  auto m = blob_model(5);
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  REQUIRE(train::fit(rt, m, blobs(40, 10, false), {.epochs = 2, .verbose = train::verbosity::auto_detect, .out = out}));
  std::rewind(out);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), out));
  std::fclose(out);
  INFO(text);
  CHECK(text.find("Epoch 1/2\n4/4 - ") != std::string::npos);
  CHECK(text.find("Epoch 2/2\n") != std::string::npos);
  CHECK(text.find(" - loss: ") != std::string::npos);
  CHECK(text.find(" - accuracy: ") != std::string::npos);
  CHECK(text.find("samples/s\n") != std::string::npos);
  CHECK(text.find('\r') == std::string::npos);
}

TEST_CASE("predict joins the batches' outputs in order", "[trainer]") {
  runtime rt;
  auto m = blob_model(6);
  auto x = random_normal({10, 4}, 8).value();
  auto all = train::predict(rt, m, data::dataset::from_tensor_slices({{"x", x}}).batch(4));
  REQUIRE(all);
  REQUIRE((*all)[0].shape() == shape{10, 3});
  auto direct = m.predict_on_batch({x});
  REQUIRE(direct);
  const auto a = (*all)[0].to_vector<float>(), b = (*direct)[0].to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
}

namespace {

/// Where fit ran its per-batch work, and which epochs began.
class thread_recorder final : public train::callback {
 public:
  expected<void> on_batch_end(train::fit_context&, const train::logs&) override {
    batch_threads.push_back(std::this_thread::get_id());
    return {};
  }
  expected<void> on_epoch_end(train::fit_context&, const train::logs&) override {
    epoch_threads.push_back(std::this_thread::get_id());
    return {};
  }
  std::vector<std::thread::id> batch_threads, epoch_threads;
};

}  // namespace

TEST_CASE("fit's steps run on the replica actor the pipeline feeds, the caller only waits", "[trainer]") {
  runtime rt;
  auto m = blob_model(4);
  auto recorder = std::make_shared<thread_recorder>();
  // An endless input: steps_per_epoch ends each epoch, which must stop the replica's feed.
  auto history = train::fit(rt, m, blobs(60, 10, true).repeat(),
                            {.epochs = 3, .callbacks = {recorder}, .steps_per_epoch = 8,
                             .verbose = train::verbosity::silent, .seed = 2});
  REQUIRE(history);
  CHECK(history->epochs.size() == 3);
  CHECK(m.updates_done() == 24);
  REQUIRE(recorder->batch_threads.size() == 24);
  const auto caller = std::this_thread::get_id();
  for (auto id : recorder->batch_threads) CHECK(id != caller);
  REQUIRE(recorder->epoch_threads.size() == 3);
  for (auto id : recorder->epoch_threads) CHECK(id == caller);
}

namespace {

/// At each epoch's end, waits until the training pipeline has prepared batches of the next epoch.
class next_epoch_watcher final : public train::callback {
 public:
  explicit next_epoch_watcher(std::shared_ptr<std::atomic<int64_t>> made) : made_(std::move(made)) {}
  expected<void> on_epoch_end(train::fit_context& ctx, const train::logs&) override {
    if (ctx.epoch < ctx.epochs)
      prepared.push_back(af::testing::eventually([&] { return made_->load() > ctx.epoch * 6; }, std::chrono::seconds(10)));
    return {};
  }
  std::vector<bool> prepared;

 private:
  std::shared_ptr<std::atomic<int64_t>> made_;
};

}  // namespace

TEST_CASE("fit runs its epochs through one topology that prepares the next epoch during validation", "[trainer]") {
  runtime rt;
  auto m = blob_model(6);
  auto made = std::make_shared<std::atomic<int64_t>>(0);
  auto counted = blobs(60, 10, true).map([made](element e) -> expected<element> {
    made->fetch_add(1);
    return e;
  });
  auto watcher = std::make_shared<next_epoch_watcher>(made);
  auto history = train::fit(rt, m, counted,
                            {.epochs = 3, .validation_data = blobs(30, 10, false), .callbacks = {watcher},
                             .verbose = train::verbosity::silent, .seed = 5});
  REQUIRE(history);
  CHECK(history->epochs.size() == 3);
  CHECK(m.updates_done() == 18);
  // After epochs 1 and 2 the pipeline, still up, had made batches of the next epoch.
  CHECK(watcher->prepared == std::vector<bool>{true, true});
  CHECK(made->load() == 18);  // and nothing beyond the last epoch
}

TEST_CASE("evaluate and predict through the replica equal the same batches run directly", "[trainer]") {
  runtime rt;
  auto m = blob_model(5);
  const auto ds = blobs(30, 7, false);
  auto it = ds.iterate(rt);
  double loss_sum = 0;
  int64_t rows = 0;
  for (auto& batch : it) {
    auto r = m.test_on_batch({*batch.find("x")}, {*batch.find("label")});
    REQUIRE(r);
    loss_sum += r->loss * static_cast<double>(batch.find("x")->dim(0));
    rows += batch.find("x")->dim(0);
  }
  auto logs = train::evaluate(rt, m, ds);
  REQUIRE(logs);
  CHECK(*train::find_log(*logs, "loss") == Approx(loss_sum / static_cast<double>(rows)).epsilon(1e-9));
  auto broken = train::evaluate(rt, m, ds.map([](element e) -> expected<element> {
    if (e.find("label")->to_vector<int64_t>()[0] >= 0) return make_error(errc::malformed_input, "label unreadable");
    return e;
  }));
  REQUIRE_FALSE(broken);
  CHECK(broken.error_value().message.find("evaluate: batch 1") == 0);
  CHECK(broken.error_value().message.find("label unreadable") != std::string::npos);
}
