// Every program in examples/ runs as the README and its own header comment say, and prints what
// they promise. Registered only when the examples are built (AF_BUILD_EXAMPLES).

#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../apps/cli_test_support.hpp"
#include "../support/scratch_dir.hpp"
#include "ops/train/layers.hpp"
#include "serialization/digits.hpp"
#include "serialization/saved_model.hpp"

using namespace af;
using namespace af::testing;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

program_result run_example(const std::string& name, std::vector<std::string> args, const fs::path& cwd) {
  args.insert(args.begin(), std::string{AF_EXAMPLES_DIR} + "/" + name);
  return run_program(std::move(args), cwd, std::chrono::seconds(120));
}

/// Group 1 of every match of `pattern` in `text`, as numbers.
std::vector<double> numbers(const std::string& text, const std::string& pattern) {
  std::vector<double> out;
  const std::regex re{pattern};
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(std::stod((*it)[1]));
  return out;
}

}  // namespace

TEST_CASE("every program in examples/ has a test here", "[examples]") {
  // Names from examples/*.cpp, comma-separated (tests/CMakeLists.txt); a new example needs a test case below.
  const std::set<std::string> tested{"classifier_with_adam", "compiled_training_step", "input_pipeline",
                                     "pipeline_basics", "serving_client", "train_digits"};
  std::istringstream names{AF_EXAMPLE_NAMES};
  int examples = 0;
  for (std::string name; std::getline(names, name, ','); ++examples) {
    INFO(name);
    CHECK(tested.count(name) == 1);
    CHECK(fs::exists(std::string{AF_EXAMPLES_DIR} + "/" + name));
  }
  CHECK(examples == static_cast<int>(tested.size()));
}

TEST_CASE("pipeline_basics squares five vectors through a three-stage topology", "[examples]") {
  scratch_dir cwd{"af_example"};
  auto r = run_example("pipeline_basics", {}, cwd.path);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK(r.out ==
        "x = tensor(f32, [4], [0, 0, 0, 0]), sum of squares = 0\n"
        "x = tensor(f32, [4], [1, 1, 1, 1]), sum of squares = 4\n"
        "x = tensor(f32, [4], [2, 2, 2, 2]), sum of squares = 16\n"
        "x = tensor(f32, [4], [3, 3, 3, 3]), sum of squares = 36\n"
        "x = tensor(f32, [4], [4, 4, 4, 4]), sum of squares = 64\n");
  CHECK(r.err.empty());
}

TEST_CASE("classifier_with_adam separates three classes with one traced step", "[examples]") {
  scratch_dir cwd{"af_example"};
  auto r = run_example("classifier_with_adam", {}, cwd.path);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK(numbers(r.out, R"(step +(\d+) +lr)") == std::vector<double>{0, 40, 80, 120, 160, 199});
  const auto loss = numbers(r.out, R"(loss (\d+\.\d+))");
  const auto accuracy = numbers(r.out, R"(accuracy (\d\.\d+))");
  REQUIRE(loss.size() == 6);
  REQUIRE(accuracy.size() == 6);
  CHECK(loss.back() < loss.front() / 10);
  CHECK(accuracy.back() >= 0.95);
  CHECK_THAT(r.out, Contains("\ntraces: 1\n"));  // the learning rate is an input: no retrace per step
}

TEST_CASE("compiled_training_step fuses the traced step and trains it as actors", "[examples]") {
  scratch_dir cwd{"af_example"};
  auto r = run_example("compiled_training_step", {}, cwd.path);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex{R"(traced (\d+) nodes, optimised to (\d+) \((\d+) fused kernels\))"}));
  CHECK(std::stoi(m[2]) < std::stoi(m[1]));
  CHECK(std::stoi(m[3]) >= 1);
  CHECK(numbers(r.out, R"(step +(\d+) +loss)") == std::vector<double>{0, 50, 100, 150, 200, 250, 300});
  const auto loss = numbers(r.out, R"(loss (\d+\.\d+))");
  REQUIRE(loss.size() == 7);
  CHECK(loss.back() < loss.front() / 100);
}

TEST_CASE("input_pipeline batches four TFRecord files, reports the stages and resumes mid-epoch", "[examples]") {
  scratch_dir cwd{"af_example"};
  auto r = run_example("input_pipeline", {cwd.path.string()}, cwd.path);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("interleave(cycle 2, block 4)") && Contains("shuffle(128)") && Contains("batch(32)"));
  // 4 files x 100 Examples in batches of 32: twelve full batches and one of 16.
  std::vector<double> in_order;
  for (int i = 0; i < 13; ++i) in_order.push_back(i);
  CHECK(numbers(r.out, R"(batch (\d+): image \[)") == in_order);
  CHECK(numbers(r.out, R"(batch (\d+): image \[32,8,8\], first label \d+\n)").size() == 12);
  CHECK(std::regex_search(r.out, std::regex{R"(batch 12: image \[16,8,8\], first label \d+\n)"}));
  for (double label : numbers(r.out, R"(first label (\d+))")) CHECK(label < 400);
  CHECK_THAT(r.out, Contains("\nbottleneck: '"));
  CHECK_THAT(r.out, Contains("resumed after batch 5: 8 more batches (of 13 in all)"));
  CHECK_FALSE(fs::exists(cwd.path / "actorflow_example_records"));  // it cleans up its files
}

TEST_CASE("train_digits fits the digits with a backup, early stopping and logs, and continues after a kill",
          "[examples]") {
  // scripts/setup installs python3-sklearn: without its data set this test fails, it does not pass.
  if (!digits::find_sklearn_digits_csv()) FAIL("python3-sklearn's digits.csv.gz is absent: run scripts/setup");
  scratch_dir cwd{"af_example"};
  // The README's two commands: the TFRecords first, then the example on them.
  REQUIRE(actorflow({"digits", "--out", "data/digits"}, cwd.path).exit_code == 0);
  auto r = run_example("train_digits", {"data/digits"}, cwd.path);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const auto epochs = numbers(r.out, R"(Epoch (\d+)/12\n)");
  REQUIRE_FALSE(epochs.empty());
  const auto accuracy = numbers(r.out, R"(test loss \d+\.\d+, test accuracy (\d\.\d+) \(\d+ traces)");
  REQUIRE(accuracy.size() == 1);
  CHECK(accuracy[0] >= 0.95);

  const auto csv = lines_of(read_text(cwd.path / "train_digits.csv"));
  REQUIRE(csv.size() == epochs.size() + 1);
  CHECK(csv[0] == "epoch,loss,accuracy,val_loss,val_accuracy");
  CHECK(csv.back().rfind(std::to_string(epochs.size() - 1) + ",", 0) == 0);
  CHECK(fs::exists(cwd.path / "train_digits_logs/train"));
  CHECK(fs::exists(cwd.path / "train_digits_logs/validation"));
  CHECK_FALSE(fs::exists(cwd.path / "train_digits_backup"));  // removed once fit completed

  // Killed after its second epoch, it starts again from the backup, not from epoch 1.
  {
    child_process first{{std::string{AF_EXAMPLES_DIR} + "/train_digits", "data/digits"}, cwd.path};
    int finished_epochs = 0;
    while (finished_epochs < 2) {
      auto line = first.read_line(std::chrono::seconds(60));
      REQUIRE(line);
      finished_epochs += line->rfind("45/45 - ", 0) == 0;
    }
    first.kill();
    CHECK(first.finish(std::chrono::seconds(10)).exit_code == -1);
  }
  REQUIRE(fs::exists(cwd.path / "train_digits_backup"));
  auto resumed = run_example("train_digits", {"data/digits"}, cwd.path);
  INFO(describe(resumed));
  REQUIRE(resumed.exit_code == 0);
  const auto resumed_epochs = numbers(resumed.out, R"(Epoch (\d+)/12\n)");
  REQUIRE_FALSE(resumed_epochs.empty());
  CHECK(resumed_epochs.front() >= 2);
  CHECK_FALSE(fs::exists(cwd.path / "train_digits_backup"));
}

TEST_CASE("serving_client predicts through a running `actorflow serve --actor_port`", "[examples]") {
  scratch_dir cwd{"af_example_serving"};
  auto x = nn::input({4}, dtype::f32, "x");
  auto y = nn::dense(3, {.name = "y"})(x);
  auto model = nn::model::functional({x}, {y}, {.seed = 3});
  REQUIRE(model);
  REQUIRE(saved_model::save(*model, (cwd.path / "dense" / "1").string()));

  child_process server{{AF_ACTORFLOW_PATH, "serve", "--model_name=dense", "--model_base_path=" + (cwd.path / "dense").string(),
                        "--port=0", "--actor_port=-1", "--enable_batching"},
                       cwd.path};
  std::string port;
  while (port.empty()) {
    auto line = server.read_line(std::chrono::seconds(60));
    REQUIRE(line);
    std::smatch m;
    if (std::regex_search(*line, m, std::regex{R"(serving: ready .* actor=(\d+))"})) port = m[1];
  }
  auto r = run_example("serving_client", {"127.0.0.1", port, "dense"}, cwd.path);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("version 1: AVAILABLE\n") && Contains("signature 'serving_default' of version 1\n") &&
                        Contains("input 'x': f32[2,4]\n") && Contains("output 'y' from version 1:"));
  server.kill();
  server.finish(std::chrono::seconds(10));
}
