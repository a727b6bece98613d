// `actorflow saved_model show|run` on a directory saved here: what show prints at each level, run's
// outputs printed and written as .npy, and clear errors for a wrong directory, signature or input.

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "../support/scratch_dir.hpp"
#include "cli_test_support.hpp"
#include "ops/random.hpp"
#include "ops/train/layers.hpp"
#include "serialization/npy.hpp"
#include "serialization/saved_model.hpp"

using namespace af;
using namespace af::testing;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

nn::model small_model() {
  auto x = nn::input({4}, dtype::f32, "x");
  auto h = nn::dense(6, {.activation = "relu"})(x);
  auto probs = nn::dense(3, {.activation = "softmax", .name = "probs"})(h);
  auto score = nn::dense(1, {.name = "score"})(h);
  auto m = nn::model::functional({x}, {probs, score}, {.seed = 2});
  REQUIRE(m);
  return std::move(*m);
}

}  // namespace

TEST_CASE("actorflow saved_model show describes the directory, its signatures and their graphs", "[cli][saved_model]") {
  scratch_dir cwd{"af_cli_saved_model"};
  auto model = small_model();
  REQUIRE(saved_model::save(model, cwd.file("m")));

  auto top = actorflow({"saved_model", "show", "--dir", "m"}, cwd.path);
  CHECK(top.exit_code == 0);
  CHECK_THAT(top.out, Contains("tag-set 'serve'"));
  auto tags = actorflow({"saved_model", "show", "--dir", "m", "--tag_set", "serve"}, cwd.path);
  CHECK(tags.exit_code == 0);
  CHECK_THAT(tags.out, Contains("  serving_default\n"));
  auto sig = actorflow({"saved_model", "show", "--dir", "m", "--tag_set", "serve", "--signature_def", "serving_default"}, cwd.path);
  INFO(describe(sig));
  CHECK(sig.exit_code == 0);
  CHECK_THAT(sig.out, Contains("'x': f32 (-1, 4)") && Contains("'probs': f32 (-1, 3)") && Contains("'score': f32 (-1, 1)") &&
                          Contains("captures 6 variables (58 values, 232 bytes)"));
  auto all = actorflow({"saved_model", "show", "--dir", "m", "--all"}, cwd.path);
  CHECK(all.exit_code == 0);
  CHECK_THAT(all.out, Contains("format version 1, op set 1, written by actorflow ") && Contains("signature 'serving_default'"));
  auto dot = actorflow({"saved_model", "show", "--dir", "m", "--tag_set", "serve", "--signature_def", "serving_default", "--dot"},
                       cwd.path);
  CHECK(dot.exit_code == 0);
  CHECK_THAT(dot.out, Contains("digraph") && Contains("matmul"));
}

TEST_CASE("actorflow saved_model run reads .npy inputs and prints or writes the outputs", "[cli][saved_model]") {
  scratch_dir cwd{"af_cli_saved_model"};
  auto model = small_model();
  REQUIRE(saved_model::save(model, cwd.file("m")));
  const tensor x = random_normal({2, 4}, 3).value();
  REQUIRE(npy::write(cwd.file("x.npy"), x));
  const auto live = model.predict_on_batch({x}).value();

  auto printed = actorflow({"saved_model", "run", "--dir", "m", "--signature_def", "serving_default", "--inputs", "x=x.npy"},
                           cwd.path);
  INFO(describe(printed));
  CHECK(printed.exit_code == 0);
  CHECK_THAT(printed.out, Contains("'probs': f32[2,3]\n[") && Contains("'score': f32[2,1]\n["));

  auto written = actorflow({"saved_model", "run", "--dir", "m", "--signature_def", "serving_default", "--inputs", "x=x.npy",
                            "--outdir", "out"},
                           cwd.path);
  CHECK(written.exit_code == 0);
  auto probs = npy::read(cwd.file("out/probs.npy"));
  REQUIRE(probs);
  CHECK(probs->to_vector<float>() == live[0].to_vector<float>());
  auto again = actorflow({"saved_model", "run", "--dir", "m", "--signature_def", "serving_default", "--inputs", "x=x.npy",
                          "--outdir", "out"},
                         cwd.path);
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.err, Contains("exists (--overwrite replaces it)"));
}

TEST_CASE("actorflow saved_model names what is wrong: directory, signature, input, file", "[cli][saved_model]") {
  scratch_dir cwd{"af_cli_saved_model"};
  auto model = small_model();
  REQUIRE(saved_model::save(model, cwd.file("m")));
  REQUIRE(npy::write(cwd.file("wide.npy"), tensor::zeros({2, 5}, dtype::f32).value()));
  std::ofstream(cwd.file("junk.npy")) << "not numpy";
  struct bad_case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<bad_case> cases = {
      {{"saved_model", "show", "--dir", "nowhere"}, "nowhere/MANIFEST"},
      {{"saved_model", "show", "--dir", "m", "--tag_set", "train"}, "no tag-set 'train'"},
      {{"saved_model", "show", "--dir", "m", "--tag_set", "serve", "--signature_def", "other"}, "no signature 'other'"},
      {{"saved_model", "run", "--dir", "m", "--signature_def", "serving_default", "--inputs", "x=wide.npy"},
       "input 'x' must be f32[-1,4], got f32[2,5]"},
      {{"saved_model", "run", "--dir", "m", "--signature_def", "serving_default", "--inputs", "y=wide.npy"}, "input 'x' is missing"},
      {{"saved_model", "run", "--dir", "m", "--signature_def", "serving_default", "--inputs", "x=junk.npy"}, "junk.npy: not a .npy file"},
      {{"saved_model", "run", "--dir", "m", "--signature_def", "serving_default", "--inputs", "x"}, "is not NAME=FILE.npy"},
      {{"saved_model", "run", "--dir", "m", "--inputs", "x=wide.npy"}, "run needs --signature_def"},
  };
  for (const auto& c : cases) {
    auto r = actorflow(c.args, cwd.path);
    INFO(describe(r));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(c.message));
  }
  auto unknown = actorflow({"saved_model", "show", "--dir", "m", "--frobnicate"}, cwd.path);
  CHECK(unknown.exit_code == 2);
}

TEST_CASE("actorflow import keras writes a SavedModel that predicts Keras' numbers, a layer we lack is named",
          "[cli][saved_model][keras]") {
  scratch_dir cwd{"af_cli_import"};
  const fs::path models = fs::path(AF_TESTS_DIR) / "data/keras_models";
  auto imported = actorflow({"import", "keras", (models / "two_inputs.keras").string(), "served"}, cwd.path);
  INFO(describe(imported));
  REQUIRE(imported.exit_code == 0);
  CHECK_THAT(imported.out, Contains("as SavedModel 'served'"));
  auto run = actorflow({"saved_model", "run", "--dir", "served", "--signature_def", "serving_default", "--inputs",
                        "u=" + (models / "two_inputs.input0.npy").string() + ";v=" + (models / "two_inputs.input1.npy").string(),
                        "--outdir", "out"},
                       cwd.path);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  std::vector<fs::path> written;
  for (const auto& e : fs::directory_iterator(cwd.path / "out")) written.push_back(e.path());
  REQUIRE(written.size() == 1);  // named after Keras' output layer
  auto ours = npy::read(written[0].string());
  auto keras = npy::read((models / "two_inputs.output0.npy").string());
  REQUIRE(ours);
  REQUIRE(keras);
  const auto a = ours->to_vector<float>(), b = keras->to_vector<float>();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-5f * (1 + std::fabs(b[i])));

  auto again = actorflow({"import", "keras", (models / "two_inputs.keras").string(), "served"}, cwd.path);
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.err, Contains("exists"));
  auto lacking = actorflow({"import", "keras", (models / "unsupported_conv1d.keras").string(), "other"}, cwd.path);
  CHECK(lacking.exit_code == 1);
  CHECK_THAT(lacking.err, Contains("the layer kind Conv1D is not supported"));
  CHECK(actorflow({"import", "onnx", "x", "y"}, cwd.path).exit_code == 2);
}
