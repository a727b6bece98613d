// `actorflow demo` (the digits CNN, what scripts/demo runs) and `actorflow topology-demo`, run as
// the README shows them: what they print, the trace and TensorBoard files they write, and their
// exit codes on bad data and bad arguments.

#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/scratch_dir.hpp"
#include "cli_test_support.hpp"
#include "serialization/digits.hpp"
#include "serialization/tfevents.hpp"

using namespace af;
using namespace af::testing;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

/// The number in the first match of `pattern`'s group 1 in `text`; -1 when absent.
double number_after(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex{pattern})) return -1;
  return std::stod(m[1]);
}

/// Checks that `path` is Chrome trace JSON holding the `spans` events the program said it wrote.
void check_chrome_trace(const fs::path& path, const std::string& out) {
  REQUIRE(fs::exists(path));
  const auto spans = number_after(out, R"(wrote (\d+) spans to )" + path.filename().string());
  CHECK(spans > 0);
  const auto doc = nlohmann::json::parse(read_text(path));  // throws, failing the test, unless JSON
  REQUIRE(doc.contains("traceEvents"));
  CHECK(static_cast<double>(doc["traceEvents"].size()) == spans);
  CHECK(doc["traceEvents"][0]["ph"] == "X");
}

/// The scalars of the single events file in `dir`.
std::vector<tfevents::scalar_event> scalars_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename().string().rfind("events.out.tfevents.", 0) == 0);
  auto scalars = tfevents::read_scalars(files[0].string());
  REQUIRE(scalars);
  return *scalars;
}

std::size_t count_tag(const std::vector<tfevents::scalar_event>& scalars, const std::string& tag) {
  std::size_t n = 0;
  for (const auto& s : scalars) n += s.tag == tag;
  return n;
}

}  // namespace

TEST_CASE("actorflow demo converts the digits, trains the CNN past 0.97 and writes its trace and logs",
          "[cli][demo]") {
  // scripts/setup installs python3-sklearn: without its data set this test fails, it does not pass.
  if (!digits::find_sklearn_digits_csv()) FAIL("python3-sklearn's digits.csv.gz is absent: run scripts/setup");
  scratch_dir cwd{"af_cli_demo"};
  // The full run (12 epochs, a few seconds): its exit code is the accuracy gate.
  auto r = actorflow({"demo"}, cwd.path, std::chrono::seconds(240));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("converted ") && Contains(": 1438 train and 359 test images into data/digits/"));
  CHECK(fs::exists(cwd.path / "data/digits/train.tfrecord"));
  CHECK_THAT(r.out, Contains("Model: \"digits_cnn\"") && Contains("Total params: 53,002"));
  for (int epoch = 1; epoch <= 12; ++epoch)
    CHECK_THAT(r.out, Contains("Epoch " + std::to_string(epoch) + "/12\n45/45 - "));
  CHECK_THAT(r.out, Contains(" - val_accuracy: "));
  const double accuracy = number_after(r.out, R"(test accuracy (0\.\d+) \(loss \d+\.\d+\) on data/digits/test\.tfrecord)");
  CHECK(accuracy >= 0.97);
  CHECK(number_after(r.out, R"(the training step was traced (\d+) times)") >= 1);

  check_chrome_trace(cwd.path / "actorflow_demo_trace.json", r.out);
  // The per-stage report after the trace: the pipeline's stages and the bottleneck line.
  for (const char* stage : {"tfrecord ", "parse ", "shuffle ", "batch ", "prefetch "})
    CHECK_THAT(r.out, Contains(std::string{"\n"} + stage));
  CHECK_THAT(r.out, Contains("\nbottleneck: '"));

  // TensorBoard's scalars: one per figure and epoch, validation figures in their own run.
  const auto train = scalars_in(cwd.path / "actorflow_demo_logs/train");
  const auto validation = scalars_in(cwd.path / "actorflow_demo_logs/validation");
  CHECK(count_tag(train, "epoch_loss") == 12);
  CHECK(count_tag(train, "epoch_accuracy") == 12);
  CHECK(count_tag(validation, "epoch_accuracy") == 12);
  CHECK(validation.back().step == 11);

  // The trained model as a SavedModel, run by a new process on the saved test batch: the live
  // model's predictions, bit for bit.
  CHECK_THAT(r.out, Contains("saved the model to actorflow_demo_model/1/"));
  auto served = actorflow({"saved_model", "run", "--dir", "actorflow_demo_model/1", "--signature_def", "serving_default",
                           "--inputs", "image=actorflow_demo_check/images.npy", "--outdir", "served"},
                          cwd.path, std::chrono::seconds(60));
  INFO(describe(served));
  REQUIRE(served.exit_code == 0);
  std::vector<fs::path> outputs;
  for (const auto& e : fs::directory_iterator(cwd.path / "served")) outputs.push_back(e.path());
  REQUIRE(outputs.size() == 1);
  CHECK(read_text(outputs[0]) == read_text(cwd.path / "actorflow_demo_check/predictions.npy"));

  // A second run finds the converted files and does not convert again.
  auto again = actorflow({"demo", "--epochs", "1", "--trace", "short.json"}, cwd.path, std::chrono::seconds(120));
  INFO(describe(again));
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.out, !Contains("converted ") && Contains("Epoch 1/1\n") && Contains("test accuracy "));
  check_chrome_trace(cwd.path / "short.json", again.out);
}

TEST_CASE("actorflow demo stops on a corrupt training file naming it and the offset, and refuses bad arguments",
          "[cli][demo]") {
  if (!digits::find_sklearn_digits_csv()) FAIL("python3-sklearn's digits.csv.gz is absent: run scripts/setup");
  scratch_dir cwd{"af_cli_demo"};
  auto data = digits::read_digits_csv(*digits::find_sklearn_digits_csv());
  REQUIRE(data);
  REQUIRE(digits::write_digits_tfrecords(*data, cwd.file("digits")));
  // Record 10 of train.tfrecord: every record is 310 bytes (16 of framing, 294 of Example).
  flip_byte(cwd.file("digits/train.tfrecord"), 10 * 310 + 100);
  auto r = actorflow({"demo", "--data", "digits", "--epochs", "1"}, cwd.path, std::chrono::seconds(120));
  INFO(describe(r));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("demo: fit: ") && Contains("epoch 1") &&
                        Contains("digits/train.tfrecord: record 10 at offset 3100: wrong data CRC"));

  for (std::vector<std::string> args : {std::vector<std::string>{"demo", "--epochs", "0"}, {"demo", "--epochs", "x"},
                                        {"demo", "--epochs"}, {"demo", "--frobnicate"}}) {
    auto bad = actorflow(args, cwd.path);
    INFO(command_line(args) << ": " << describe(bad));
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Contains("usage: actorflow demo"));
  }
  CHECK_FALSE(fs::exists(cwd.path / "data"));  // refused before converting anything
}

TEST_CASE("actorflow topology-demo streams 400 batches, matches the direct computation and writes its trace",
          "[cli][demo]") {
  scratch_dir cwd{"af_cli_topology"};
  auto r = actorflow({"topology-demo"}, cwd.path, std::chrono::seconds(120));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("topology (8 slots in all):\ndigraph pipeline {") &&
                        Contains("streamed 400 batches of [64,784] in ") &&
                        Contains("last batch (#399) equals the direct computation: yes") &&
                        Contains("device cpu:0 rejects a bad request with: shape_mismatch: matmul on cpu:0") &&
                        Contains("device cpu:0 matmul equals the direct one: yes"));
  check_chrome_trace(cwd.path / "actorflow_topology_trace.json", r.out);
  for (const char* stage : {"batches ", "normalize ", "dense_relu ", "reader "})
    CHECK_THAT(r.out, Contains(std::string{"\n"} + stage));
  CHECK_THAT(r.out, Contains("\nbottleneck: '"));
}

TEST_CASE("actorflow topology-demo refuses a count that is not a positive number and names an unwritable trace",
          "[cli][demo]") {
  scratch_dir cwd{"af_cli_topology"};
  for (const char* batches : {"0", "-3", "x", "12x"}) {
    auto r = actorflow({"topology-demo", "--batches", batches}, cwd.path, std::chrono::seconds(30));
    INFO(batches << ": " << describe(r));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("usage: actorflow topology-demo"));
  }
  auto short_run = actorflow({"topology-demo", "--batches", "3", "--trace", cwd.file("no/such/dir/trace.json")},
                             cwd.path, std::chrono::seconds(60));
  INFO(describe(short_run));
  CHECK(short_run.exit_code == 1);
  CHECK_THAT(short_run.out, Contains("last batch (#2) equals the direct computation: yes"));
  CHECK_THAT(short_run.err, Contains("cannot open " + cwd.file("no/such/dir/trace.json")));
}
