// `actorflow info`, the command list, and `actorflow digits --out DIR` as the README shows them.

#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <string>

#include "../support/scratch_dir.hpp"
#include "cli_test_support.hpp"
#include "serialization/digits.hpp"

using namespace af;
using namespace af::testing;
using Catch::Contains;
namespace fs = std::filesystem;

TEST_CASE("actorflow info prints the version, the thread budget, the CUDA build and the GPU", "[cli]") {
  scratch_dir cwd{"af_cli_info"};
  auto r = actorflow({"info"}, cwd.path);
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 4);
  CHECK(std::regex_match(lines[0], std::regex{R"(actorflow \d+\.\d+\.\d+)"}));
  CHECK(std::regex_match(lines[1], std::regex{R"(cpu: \d+ hardware threads, kernel thread budget [1-9]\d*)"}));
  CHECK(std::regex_match(lines[2], std::regex{"cuda backend: (built|not built)"}));
  CHECK(lines[3].rfind("gpu: ", 0) == 0);
}

TEST_CASE("actorflow lists its commands on --help and refuses unknown ones with exit code 2", "[cli]") {
  scratch_dir cwd{"af_cli_usage"};
  auto help = actorflow({"--help"}, cwd.path);
  INFO(describe(help));
  CHECK(help.exit_code == 0);
  for (const char* command : {"info", "demo", "topology-demo", "node", "records", "digits"})
    CHECK_THAT(help.out, Contains(std::string{"\n  "} + command + " "));

  auto bare = actorflow({}, cwd.path);
  CHECK(bare.exit_code == 2);
  CHECK_THAT(bare.err, Contains("usage: actorflow <command>"));
  auto unknown = actorflow({"frobnicate"}, cwd.path);
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Contains("unknown command 'frobnicate'"));

  // Every command refuses a flag it does not take, with its usage, and runs nothing.
  for (const char* command : {"info", "demo", "topology-demo", "records", "digits", "import", "saved_model", "serve"}) {
    auto typo = actorflow({command, "--no-such-flag"}, cwd.path);
    INFO(command << ": " << describe(typo));
    CHECK(typo.exit_code == 2);
    CHECK_THAT(typo.err + typo.out, Contains("usage: actorflow " + std::string{command}));
  }
}

TEST_CASE("actorflow digits --out DIR splits the 1,797 digits into 1,438 train and 359 test records, the same each time",
          "[cli][digits]") {
  // scripts/setup installs python3-sklearn: without its data set this test fails, it does not pass.
  if (!digits::find_sklearn_digits_csv()) FAIL("python3-sklearn's digits.csv.gz is absent: run scripts/setup");
  scratch_dir cwd{"af_cli_digits"};
  auto r = actorflow({"digits", "--out", "data/digits"}, cwd.path);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("read 1797 images from ") && Contains("split with seed 42, test fraction 0.2: 1438 train, 359 test") &&
                        Contains("wrote data/digits/train.tfrecord (1438 records)") &&
                        Contains("wrote data/digits/test.tfrecord (359 records)"));

  // What the files hold, by the README's next command.
  auto counted = actorflow({"records", "count", "data/digits/train.tfrecord", "data/digits/test.tfrecord"}, cwd.path);
  INFO(describe(counted));
  CHECK(counted.out == "data/digits/train.tfrecord\t1438\ndata/digits/test.tfrecord\t359\ntotal\t1797\n");

  // A fixed seed: a second conversion writes the same bytes.
  auto again = actorflow({"digits", "--out=again"}, cwd.path);
  REQUIRE(again.exit_code == 0);
  for (const char* file : {"train.tfrecord", "test.tfrecord"})
    CHECK(read_text(cwd.path / "again" / file) == read_text(cwd.path / "data/digits" / file));
}

TEST_CASE("actorflow digits names a missing CSV and refuses bad options", "[cli][digits]") {
  scratch_dir cwd{"af_cli_digits"};
  auto missing = actorflow({"digits", "--csv", "nowhere.csv.gz", "--out", "out"}, cwd.path);
  INFO(describe(missing));
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Contains("nowhere.csv.gz"));
  CHECK_FALSE(fs::exists(cwd.path / "out" / "train.tfrecord"));

  auto fraction = actorflow({"digits", "--test-fraction", "2"}, cwd.path);
  CHECK(fraction.exit_code == 2);
  CHECK_THAT(fraction.err, Contains("--test-fraction wants a number in 0..1, got '2'"));
  auto unknown = actorflow({"digits", "--frobnicate"}, cwd.path);
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Contains("unknown argument '--frobnicate'"));
}
