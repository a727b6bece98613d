// Our layers against Keras' own numbers: tests/data/keras/*.txt hold, for LSTM, GRU,
// BatchNormalization, Conv2D, DepthwiseConv2D and SeparableConv2D, the options Keras built the
// layer with, an input, the weights in Keras' layouts, Keras' output, its gradients of
// sum(output * probe) for the input and every trainable weight, and for BatchNormalization in
// training mode the moving statistics after the step. scripts/make_keras_fixtures.py wrote them
// with pip's TensorFlow; the files are committed, so this test needs no TensorFlow.
//
// Everything runs in f32, as Keras did. Tolerance: |ours - keras| <= tol * (1 + |keras|) with
// tol = 1e-5 for outputs, gradients and moving statistics. Measured worst (TF 2.21, Keras 3.15):
// outputs 2.3e-7 (conv2d_valid), gradients 3.7e-7, moving statistics 3e-8, i.e. a few f32 ulps:
// the two libraries sum in different orders (convolution windows, matmuls, batch-norm reductions
// over up to 32 values, which also differ between our AVX-512 and AVX2 loops) and use different
// tanh/sigmoid/exp kernels. A wrong formula (a variance divided by n - 1, a misplaced epsilon or
// padding) errs by 1e-3 or more. `test_ops "[keras]" -s` prints each comparison's worst error.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "layer_test_support.hpp"
#include "ops/train/layers.hpp"

namespace fs = std::filesystem;
using namespace af;
using namespace layer_testing;

namespace {

constexpr double keras_tolerance = 1e-5;

// tests/<relative> in the source tree (tests/CMakeLists.txt defines AF_TESTS_DIR: __FILE__ is
// relative to the build tree when scripts/build compiles through ccache).
fs::path tests_folder(const std::string& relative) { return fs::path(AF_TESTS_DIR) / relative; }

fs::path fixture_dir() { return tests_folder("data/keras"); }

struct fixture_tensor {
  std::string name;
  shape dims;
  values data;
};

/// One fixture file of scripts/make_keras_fixtures.py's text format.
struct keras_fixture {
  std::string file, layer_kind;
  std::map<std::string, std::vector<std::string>> options;
  std::vector<fixture_tensor> tensors;  // file order

  const fixture_tensor& tensor(const std::string& name) const {
    for (const auto& t : tensors)
      if (t.name == name) return t;
    FAIL(file << ": no tensor '" << name << "'");
    return tensors.front();
  }
  /// The tensors whose names start with `prefix` ("weight:", "grad:", "after:"), in file order.
  std::vector<const fixture_tensor*> starting_with(const std::string& prefix) const {
    std::vector<const fixture_tensor*> out;
    for (const auto& t : tensors)
      if (t.name.rfind(prefix, 0) == 0) out.push_back(&t);
    return out;
  }
  const std::vector<std::string>& option(const std::string& name) const {
    auto it = options.find(name);
    if (it == options.end() || it->second.empty()) FAIL(file << ": no option '" << name << "'");
    return it->second;
  }
  std::string word(const std::string& name) const { return option(name).front(); }
  int64_t integer(const std::string& name) const { return std::stoll(word(name)); }
  double number(const std::string& name) const { return std::stod(word(name)); }
  bool flag(const std::string& name) const { return integer(name) != 0; }
  std::array<int64_t, 2> pair(const std::string& name) const {
    const auto& v = option(name);
    REQUIRE(v.size() == 2);
    return {std::stoll(v[0]), std::stoll(v[1])};
  }
};

keras_fixture load_fixture(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  keras_fixture f;
  f.file = path.filename().string();
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string keyword, name;
    words >> keyword;
    if (keyword == "layer") {
      words >> f.layer_kind;
    } else if (keyword == "option") {
      words >> name;
      for (std::string v; words >> v;) f.options[name].push_back(v);
    } else if (keyword == "tensor") {
      fixture_tensor t;
      words >> t.name;
      for (int64_t d; words >> d;) t.dims.push_back(d);
      std::string numbers;
      REQUIRE(std::getline(in, numbers));
      std::istringstream values_in(numbers);
      for (double v; values_in >> v;) t.data.push_back(v);
      INFO(f.file << ": tensor " << t.name);
      REQUIRE(static_cast<int64_t>(t.data.size()) == numel(t.dims));
      f.tensors.push_back(std::move(t));
    } else {
      FAIL(f.file << ": unknown line '" << line << "'");
    }
  }
  return f;
}

/// The fixtures of one Keras layer class, sorted by file name.
std::vector<keras_fixture> fixtures_of(const std::string& layer_kind) {
  INFO("fixtures in " << fixture_dir().string() << " (committed; scripts/make_keras_fixtures.py rewrites them)");
  REQUIRE(fs::is_directory(fixture_dir()));
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(fixture_dir()))
    if (entry.path().extension() == ".txt") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  std::vector<keras_fixture> out;
  for (const auto& p : paths) {
    auto f = load_fixture(p);
    if (f.layer_kind == layer_kind) out.push_back(std::move(f));
  }
  return out;
}

padding_mode padding_of(const keras_fixture& f) {
  const auto p = f.word("padding");
  REQUIRE((p == "same" || p == "valid"));
  return p == "same" ? padding_mode::same : padding_mode::valid;
}

void require_channels_last(const keras_fixture& f) { REQUIRE(f.word("data_format") == "channels_last"); }

/// Our layer with the options Keras recorded.
nn::layer_ptr layer_for(const keras_fixture& f) {
  const std::string& kind = f.layer_kind;
  if (kind == "Conv2D") {
    require_channels_last(f);
    return nn::conv2d(f.integer("filters"), f.pair("kernel_size"),
                      {.strides = f.pair("strides"), .padding = padding_of(f), .dilations = f.pair("dilation_rate"),
                       .activation = f.word("activation"), .use_bias = f.flag("use_bias")});
  }
  if (kind == "DepthwiseConv2D") {
    require_channels_last(f);
    return nn::depthwise_conv2d(f.pair("kernel_size"),
                                {.depth_multiplier = f.integer("depth_multiplier"), .strides = f.pair("strides"),
                                 .padding = padding_of(f), .dilations = f.pair("dilation_rate"),
                                 .activation = f.word("activation"), .use_bias = f.flag("use_bias")});
  }
  if (kind == "SeparableConv2D") {
    require_channels_last(f);
    return nn::separable_conv2d(f.integer("filters"), f.pair("kernel_size"),
                                {.depth_multiplier = f.integer("depth_multiplier"), .strides = f.pair("strides"),
                                 .padding = padding_of(f), .dilations = f.pair("dilation_rate"),
                                 .activation = f.word("activation"), .use_bias = f.flag("use_bias")});
  }
  if (kind == "BatchNormalization") {
    REQUIRE(f.integer("axis") == -1);  // ours normalises per last axis
    return nn::batch_normalization(
        {.momentum = f.number("momentum"), .epsilon = f.number("epsilon"), .center = f.flag("center"), .scale = f.flag("scale")});
  }
  if (kind == "LSTM" || kind == "GRU") {
    REQUIRE_FALSE(f.flag("go_backwards"));
    REQUIRE_FALSE(f.flag("stateful"));
    nn::recurrent_options o{.return_sequences = f.flag("return_sequences"),
                            .activation = f.word("activation"),
                            .recurrent_activation = f.word("recurrent_activation"),
                            .use_bias = f.flag("use_bias")};
    if (kind == "LSTM") {
      o.unit_forget_bias = f.flag("unit_forget_bias");
      return nn::lstm(f.integer("units"), o);
    }
    o.reset_after = f.flag("reset_after");
    return nn::gru(f.integer("units"), o);
  }
  FAIL("no layer for Keras class " << kind);
  return {};
}

/// max |ours - keras| / (1 + |keras|), checked against keras_tolerance; -s shows the value.
void check_close(const keras_fixture& f, const std::string& what, const values& ours, const fixture_tensor& keras) {
  INFO(f.file << ": " << what << " vs Keras' " << keras.name);
  REQUIRE(ours.size() == keras.data.size());
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double e = std::fabs(ours[i] - keras.data[i]) / (1 + std::fabs(keras.data[i]));
    if (e > worst) {
      worst = e;
      at = i;
    }
  }
  INFO("worst at element " << at << ": ours " << ours[at] << ", Keras " << keras.data[at]);
  CHECK(worst <= keras_tolerance);
}

/// Builds our layer from the fixture, runs it on Keras' input and weights in f32, and compares the
/// output, the gradients and (batch norm while training) the moving statistics.
void check_against_keras(const keras_fixture& f) {
  INFO(f.file);
  auto layer = layer_for(f);
  const auto& x = f.tensor("input");
  const shape sample(x.dims.begin() + 1, x.dims.end());
  auto b = build(layer, sample);

  // Same weights, same order, same layouts as Keras.
  const auto keras_weights = f.starting_with("weight:");
  const auto& ours = layer->weights();
  REQUIRE(keras_weights.size() == ours.size());
  std::vector<values> weights;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    INFO(ours[i].name << " vs Keras' " << keras_weights[i]->name);
    REQUIRE(ours[i].spec.dims == keras_weights[i]->dims);
    weights.push_back(keras_weights[i]->data);
  }

  const bool training = f.options.count("training") != 0 && f.flag("training");
  auto r = run_ok(b, make_tensor(x.data, x.dims, dtype::f32), weights, training, dtype::f32);
  const auto& y = f.tensor("output");
  REQUIRE(r.y.shape() == y.dims);
  check_close(f, "output", r.y.to_vector<double>(), y);
  check_close(f, "d/d input", r.grad_x, f.tensor("grad:input"));

  // Keras lists gradients for its trainable weights, in weight order, as ours are.
  const auto keras_grads = f.starting_with("grad:");
  std::size_t g = 1;  // after grad:input
  for (std::size_t i = 0; i < ours.size(); ++i) {
    if (!ours[i].trainable) continue;
    REQUIRE(g < keras_grads.size());
    check_close(f, "d/d " + ours[i].name, r.grad_w[i], *keras_grads[g++]);
  }
  CHECK(g == keras_grads.size());

  const auto after = f.starting_with("after:");
  if (!training) {
    CHECK(after.empty());
    CHECK(r.assigned.empty());
    return;
  }
  std::size_t a = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    if (ours[i].trainable) continue;
    REQUIRE(a < after.size());
    REQUIRE(r.assigned.count(static_cast<int>(i)) == 1);
    check_close(f, ours[i].name + " after the step", r.assigned.at(static_cast<int>(i)), *after[a++]);
  }
  CHECK(a == after.size());
}

void check_all(const std::string& layer_kind, std::size_t at_least) {
  const auto fixtures = fixtures_of(layer_kind);
  // The fixtures are committed: fewer than written means a file went missing.
  REQUIRE(fixtures.size() >= at_least);
  for (const auto& f : fixtures) check_against_keras(f);
}

}  // namespace

TEST_CASE("Conv2D matches Keras: valid, same with stride 2 and relu, dilation 2 without bias", "[layers][keras]") {
  check_all("Conv2D", 3);
}

TEST_CASE("DepthwiseConv2D matches Keras: depth multiplier 2 with same padding and stride 2, dilation with tanh",
          "[layers][keras]") {
  check_all("DepthwiseConv2D", 2);
}

TEST_CASE("SeparableConv2D matches Keras: depth multiplier 2 with same padding, valid with stride 2", "[layers][keras]") {
  check_all("SeparableConv2D", 2);
}

TEST_CASE("BatchNormalization matches Keras: training output and moving statistics, inference, without scale and centre",
          "[layers][keras]") {
  check_all("BatchNormalization", 4);
}

TEST_CASE("LSTM matches Keras: last step, whole sequences, without bias", "[layers][keras]") { check_all("LSTM", 3); }

TEST_CASE("GRU matches Keras: reset_after, whole sequences, and the reset-before variant", "[layers][keras]") {
  check_all("GRU", 3);
}
