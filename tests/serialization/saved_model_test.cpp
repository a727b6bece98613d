// SavedModel directories: a model saved and loaded without its code gives the live model's
// predictions bit for bit, at any batch size; the directory's files are checked and every
// corruption (1000 random ones) is refused or loads an identical model, never a crash.

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "../support/scratch_dir.hpp"
#include "ops/random.hpp"
#include "ops/train/layers.hpp"
#include "serialization/saved_model.hpp"

using namespace af;
namespace fs = std::filesystem;

namespace {

nn::model cnn() {
  auto x = nn::input({8, 8, 1}, dtype::f32, "image");
  auto h = nn::conv2d(4, {3, 3}, {.padding = padding_mode::same, .activation = "relu"})(x);
  h = nn::batch_normalization()(h);
  h = nn::max_pool2d()(h);
  h = nn::separable_conv2d(6, {3, 3})(h);
  h = nn::flatten()(h);
  h = nn::dropout(0.3)(h);
  auto y = nn::dense(5, {.activation = "softmax", .name = "probs"})(h);
  auto m = nn::model::functional({x}, {y}, {.seed = 3});
  REQUIRE(m);
  return std::move(*m);
}

nn::model recurrent() {
  auto tokens = nn::input({6}, dtype::i64, "tokens");
  auto e = nn::embedding(20, 8)(tokens);
  auto a = nn::lstm(5, {.return_sequences = true})(e);
  auto b = nn::gru(5, {.return_sequences = true})(e);
  auto joined = nn::concatenate()({a, b});
  auto n = nn::layer_normalization()(joined);
  auto pooled = nn::flatten()(n);
  auto out = nn::dense(2)(pooled);
  auto m = nn::model::functional({tokens}, {out}, {.seed = 5});
  REQUIRE(m);
  return std::move(*m);
}

nn::model two_outputs() {
  auto x = nn::input({4}, dtype::f32, "x");
  auto h = nn::dense(8, {.activation = "gelu"})(x);
  auto skip = nn::dense(8)(x);
  auto sum = nn::add()({h, skip});
  auto first = nn::dense(3, {.name = "first"})(sum);
  auto second = nn::dense(1, {.activation = "sigmoid", .name = "second"})(sum);
  auto m = nn::model::functional({x}, {first, second}, {.seed = 7});
  REQUIRE(m);
  return std::move(*m);
}

tensor inputs_for(const nn::model& m, int64_t batch, uint64_t seed) {
  auto spec = m.input_specs().front();
  shape dims{batch};
  for (auto d : spec.dims) dims.push_back(d);
  if (spec.type == dtype::i64) {
    auto u = random_uniform(dims, seed, dtype::f32, 0.0, 19.99).value();
    std::vector<int64_t> ids;
    for (float v : u.to_vector<float>()) ids.push_back(static_cast<int64_t>(v));
    return tensor::from_vector<int64_t>(ids, dims);
  }
  return random_normal(dims, seed).value();
}

bool same_bytes(const tensor& a, const tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() &&
         std::equal(static_cast<const char*>(a.raw_data()), static_cast<const char*>(a.raw_data()) + a.nbytes(),
                    static_cast<const char*>(b.raw_data()));
}

void rewrite_manifest(const fs::path& dir) {
  std::vector<std::string> lines;
  for (auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == "MANIFEST") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    lines.push_back(saved_model::sha256_hex(bytes) + "  " + fs::relative(entry.path(), dir).generic_string() + "\n");
  }
  std::sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a.substr(66) < b.substr(66); });
  std::ofstream out(dir / "MANIFEST", std::ios::binary | std::ios::trunc);
  for (const auto& l : lines) out << l;
}

}  // namespace

TEST_CASE("a saved model loaded without its code predicts what the live model predicts, bit for bit", "[saved_model]") {
  testing::scratch_dir scratch{"af_saved_model"};
  auto [name, m] = GENERATE(as<std::pair<std::string, nn::model (*)()>>{}, std::make_pair(std::string{"cnn"}, &cnn),
                            std::make_pair(std::string{"recurrent"}, &recurrent),
                            std::make_pair(std::string{"two outputs"}, &two_outputs));
  INFO(name);
  auto model = m();
  const std::string dir = scratch.file(name);
  REQUIRE(saved_model::save(model, dir));
  for (const char* file : {"saved_model.afm", "MANIFEST", "variables/index", "variables/data"})
    CHECK(fs::exists(fs::path(dir) / file));

  auto loaded = saved_model::load(dir);
  INFO((loaded ? std::string{} : loaded.error_value().to_string()));
  REQUIRE(loaded);
  const auto* sig = loaded->find_signature("serving_default");
  REQUIRE(sig);
  CHECK(sig->inputs.size() == model.input_names().size());
  CHECK(sig->inputs[0].name == model.input_names()[0]);
  CHECK(sig->inputs[0].type.dims[0] == -1);
  CHECK(sig->captures.size() == model.weights().size());
  CHECK(loaded->info().format_version == saved_model::format_version);
  CHECK(loaded->info().tags == std::vector<std::string>{"serve"});
  for (int64_t batch : {1, 3, 16}) {
    INFO("batch " << batch);
    const tensor x = inputs_for(model, batch, static_cast<uint64_t>(batch));
    auto live = model.predict_on_batch({x});
    REQUIRE(live);
    auto served = loaded->call("serving_default", {x});
    REQUIRE(served);
    REQUIRE(served->size() == live->size());
    for (std::size_t i = 0; i < live->size(); ++i) CHECK(same_bytes((*served)[i], (*live)[i]));
  }
  auto by_name = loaded->call("serving_default", std::vector<named_tensor>{{sig->inputs[0].name, inputs_for(model, 2, 9)}});
  REQUIRE(by_name);
  CHECK((*by_name)[0].name == sig->outputs[0].name);
}

TEST_CASE("saving refuses an existing directory unless asked to replace it, and replaces it whole", "[saved_model]") {
  testing::scratch_dir scratch{"af_saved_model"};
  const std::string dir = scratch.file("model");
  auto first = two_outputs();
  REQUIRE(saved_model::save(first, dir));
  auto again = saved_model::save(first, dir);
  REQUIRE_FALSE(again);
  CHECK(again.error_value().message.find("exists") != std::string::npos);

  auto other = cnn();
  REQUIRE(saved_model::save(other, dir, {.overwrite = true}));
  auto loaded = saved_model::load(dir);
  REQUIRE(loaded);
  CHECK(loaded->find_signature("serving_default")->inputs[0].name == "image");
  for (const auto& entry : fs::directory_iterator(scratch.path))  // no temporary or old copies left
    CHECK(entry.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("a SavedModel's damage is refused naming the file and the problem", "[saved_model]") {
  testing::scratch_dir scratch{"af_saved_model"};
  const std::string dir = scratch.file("model");
  auto model = two_outputs();
  REQUIRE(saved_model::save(model, dir));
  const std::string copy = scratch.file("copy");
  auto fresh = [&] {
    fs::remove_all(copy);
    fs::copy(dir, copy, fs::copy_options::recursive);
    return fs::path(copy);
  };
  SECTION("a file the manifest lists is missing") {
    fs::remove(fresh() / "variables" / "index");
    auto r = saved_model::load(copy);
    REQUIRE_FALSE(r);
    CHECK(r.error_value().code == errc::io_error);
    CHECK(r.error_value().message.find("variables/index") != std::string::npos);
  }
  SECTION("no manifest") {
    fs::remove(fresh() / "MANIFEST");
    auto r = saved_model::load(copy);
    REQUIRE_FALSE(r);
    CHECK(r.error_value().message.find("MANIFEST") != std::string::npos);
  }
  SECTION("a changed byte of the graphs") {
    testing::flip_byte((fresh() / "saved_model.afm").string(), 40);
    auto r = saved_model::load(copy);
    REQUIRE_FALSE(r);
    CHECK(r.error_value().code == errc::malformed_input);
    CHECK(r.error_value().message.find("saved_model.afm") != std::string::npos);
    CHECK(r.error_value().message.find("SHA-256") != std::string::npos);
  }
  SECTION("a changed byte of a weight: refused before the first call, naming the tensor") {
    testing::flip_byte((fresh() / "variables" / "data").string(), 3);
    auto r = saved_model::load(copy);
    REQUIRE(r);
    auto y = r->call("serving_default", {inputs_for(model, 2, 1)});
    REQUIRE_FALSE(y);
    CHECK(y.error_value().code == errc::malformed_input);
    CHECK(y.error_value().message.find("variables/data") != std::string::npos);
    CHECK(y.error_value().message.find("digest mismatch") != std::string::npos);
    auto eager = saved_model::load(copy, {.verify_variables_now = true});
    REQUIRE_FALSE(eager);
  }
  SECTION("a manifest path that leaves the directory") {
    fresh();
    std::ofstream(fs::path(copy) / "MANIFEST", std::ios::app) << std::string(64, 'a') << "  ../../etc/passwd\n";
    auto r = saved_model::load(copy);
    REQUIRE_FALSE(r);
    CHECK(r.error_value().message.find("not a file inside the directory") != std::string::npos);
  }
  SECTION("a newer format, even with a manifest that agrees") {
    // The root struct follows the segment table (8 bytes) and the root pointer (8 bytes); its
    // first field is the format version.
    testing::flip_byte((fresh() / "saved_model.afm").string(), 16);  // 1 -> 0x41
    rewrite_manifest(copy);
    auto r = saved_model::load(copy);
    REQUIRE_FALSE(r);
    CHECK(r.error_value().code == errc::unsupported);
    CHECK(r.error_value().message.find("format version 65; this build reads 1 to 1") != std::string::npos);
  }
  SECTION("an input of the wrong shape or dtype") {
    auto loaded = saved_model::load(dir);
    REQUIRE(loaded);
    auto wrong = loaded->call("serving_default", {tensor::zeros({2, 5}, dtype::f32).value()});
    REQUIRE_FALSE(wrong);
    CHECK(wrong.error_value().message.find("input 'x' must be f32[-1,4]") != std::string::npos);
    CHECK_FALSE(loaded->call("nope", {inputs_for(model, 1, 1)}));
  }
}

TEST_CASE("1000 random corruptions of a SavedModel are each refused or load an identical model", "[saved_model]") {
  testing::scratch_dir scratch{"af_saved_model_mutations"};
  const std::string dir = scratch.file("model");
  auto model = two_outputs();
  REQUIRE(saved_model::save(model, dir));
  const tensor x = inputs_for(model, 3, 4);
  const auto expected = model.predict_on_batch({x}).value();
  std::vector<fs::path> files;
  for (auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(fs::relative(entry.path(), dir));
  std::sort(files.begin(), files.end());

  std::mt19937_64 rng{2026};
  const fs::path copy = scratch.file("copy");
  int refused = 0;
  std::map<fs::path, int> refused_by_file;  // damage to every file must be caught at least once
  for (int round = 0; round < 1000; ++round) {
    fs::remove_all(copy);
    fs::copy(dir, copy, fs::copy_options::recursive);
    const fs::path target = copy / files[rng() % files.size()];
    const auto size = fs::file_size(target);
    std::string what;
    switch (rng() % 4) {
      case 0:  // flip bits of one byte
        if (size == 0) break;
        {
          const auto at = rng() % size;
          std::fstream f(target, std::ios::in | std::ios::out | std::ios::binary);
          f.seekg(static_cast<std::streamoff>(at));
          char c = 0;
          f.read(&c, 1);
          c = static_cast<char>(c ^ static_cast<char>(1 + rng() % 255));
          f.seekp(static_cast<std::streamoff>(at));
          f.write(&c, 1);
          what = "flipped byte " + std::to_string(at);
        }
        break;
      case 1:  // truncate
        fs::resize_file(target, size == 0 ? 0 : rng() % size);
        what = "truncated";
        break;
      case 2:  // extend with garbage
        {
          std::ofstream f(target, std::ios::binary | std::ios::app);
          for (int i = 0, n = 1 + static_cast<int>(rng() % 64); i < n; ++i) f.put(static_cast<char>(rng()));
          what = "extended";
        }
        break;
      case 3:  // remove
        fs::remove(target);
        what = "removed";
        break;
    }
    // Half the time the manifest is made to agree, so the decoders themselves meet the damage.
    if (rng() % 2 == 0 && fs::exists(copy / "MANIFEST") && target.filename() != "MANIFEST") {
      rewrite_manifest(copy);
      what += ", manifest rewritten";
    }
    INFO("round " << round << ": " << target.string() << " " << what);
    auto loaded = saved_model::load(copy.string());
    if (!loaded) {
      CHECK_FALSE(loaded.error_value().message.empty());
      ++refused;
      ++refused_by_file[fs::relative(target, copy)];
      continue;
    }
    auto y = loaded->call("serving_default", {x});
    if (!y) {
      CHECK_FALSE(y.error_value().message.empty());
      ++refused;
      ++refused_by_file[fs::relative(target, copy)];
      continue;
    }
    REQUIRE(y->size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) CHECK(same_bytes((*y)[i], expected[i]));
  }
  INFO(refused << " of 1000 refused");
  CHECK(refused > 900);
  for (const auto& file : files) {
    INFO(file.string());
    CHECK(refused_by_file[file] > 0);
  }
}
