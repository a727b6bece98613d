// Keras 3 archives imported without Python: twelve models of every supported layer kind (written
// by scripts/check_keras_import.py --fixtures with Keras 3.15, committed) predict Keras' own numbers
// within 1e-5 and survive a SavedModel round trip; a layer we lack, a damaged archive and random
// corruptions are refused naming the file.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "../support/scratch_dir.hpp"
#include "serialization/keras_import.hpp"
#include "serialization/npy.hpp"
#include "serialization/saved_model.hpp"

using namespace af;
namespace fs = std::filesystem;

namespace {

fs::path fixtures() { return fs::path(AF_TESTS_DIR) / "data/keras_models"; }

const char* const models[] = {"mlp",      "cnn",      "depthwise",       "separable",    "lstm",        "gru_sequences",
                              "recurrent_stack", "residual", "concat_branches", "reshape_conv", "two_outputs", "two_inputs"};

std::vector<tensor> numbered(const std::string& name, const char* kind) {
  std::vector<tensor> out;
  for (int i = 0;; ++i) {
    const auto path = fixtures() / (name + "." + kind + std::to_string(i) + ".npy");
    if (!fs::exists(path)) return out;
    auto t = npy::read(path.string());
    REQUIRE(t);
    out.push_back(*t);
  }
}

double max_relative_error(const tensor& ours, const tensor& keras) {
  REQUIRE(ours.shape() == keras.shape());
  const auto a = ours.to_vector<double>(), b = keras.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / (1 + std::fabs(b[i])));
  return worst;
}

}  // namespace

TEST_CASE("imported Keras models predict Keras' numbers and keep them through a SavedModel", "[keras]") {
  testing::scratch_dir scratch{"af_keras_import"};
  for (const std::string name : models) {
    INFO(name);
    const auto archive = fixtures() / (name + ".keras");
    REQUIRE(fs::exists(archive));
    auto model = keras::import_model(archive.string());
    INFO((model ? std::string{} : model.error_value().to_string()));
    REQUIRE(model);
    const auto inputs = numbered(name, "input");
    const auto expected = numbered(name, "output");
    REQUIRE_FALSE(inputs.empty());
    auto ours = model->predict_on_batch(inputs);
    REQUIRE(ours);
    REQUIRE(ours->size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(max_relative_error((*ours)[i], expected[i]) <= 1e-5);

    const std::string dir = scratch.file(name);
    REQUIRE(saved_model::save(*model, dir));
    auto loaded = saved_model::load(dir);
    REQUIRE(loaded);
    auto served = loaded->call("serving_default", inputs);
    REQUIRE(served);
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(max_relative_error((*served)[i], expected[i]) <= 1e-5);
  }
}

TEST_CASE("a Keras layer we lack, a damaged archive or a missing one is refused naming it", "[keras]") {
  auto conv1d = keras::import_model((fixtures() / "unsupported_conv1d.keras").string());
  REQUIRE_FALSE(conv1d);
  CHECK(conv1d.error_value().code == errc::unsupported);
  CHECK(conv1d.error_value().message.find("(Conv1D): the layer kind Conv1D is not supported") != std::string::npos);

  auto missing = keras::import_model("/nonexistent/model.keras");
  REQUIRE_FALSE(missing);
  CHECK(missing.error_value().message.find("/nonexistent/model.keras") != std::string::npos);

  testing::scratch_dir scratch{"af_keras_import"};
  const std::string not_zip = scratch.file("not_a_zip.keras");
  std::ofstream(not_zip) << "this is no zip archive";
  auto junk = keras::import_model(not_zip);
  REQUIRE_FALSE(junk);
  CHECK(junk.error_value().code == errc::malformed_input);
  CHECK(junk.error_value().message.find("not a readable zip archive") != std::string::npos);
}

TEST_CASE("500 random corruptions of a Keras archive are each refused or imported, never a crash", "[keras]") {
  testing::scratch_dir scratch{"af_keras_mutations"};
  std::ifstream in(fixtures() / "cnn.keras", std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(good.size() > 1000);
  std::mt19937_64 rng{15};
  const std::string path = scratch.file("mutated.keras");
  int refused = 0;
  for (int round = 0; round < 500; ++round) {
    std::string bytes = good;
    switch (rng() % 3) {
      case 0:
        for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 1: bytes.resize(rng() % bytes.size()); break;
      case 2: bytes.insert(rng() % bytes.size(), std::string(1 + rng() % 16, static_cast<char>(rng()))); break;
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    INFO("round " << round);
    auto model = keras::import_model(path);
    if (!model) {
      ++refused;
      CHECK(model.error_value().message.find(path) != std::string::npos);
    }
  }
  CHECK(refused > 400);
}
