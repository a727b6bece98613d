// Checks against files that TensorFlow itself wrote (scripts/make_tf_reference_records.py puts
// them in tests/data/tf_records with expected.json). Without that folder the tests pass with a
// warning, so a checkout without TensorFlow-made files still builds and tests.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

namespace fs = std::filesystem;

namespace {

fs::path reference_dir() { return fs::path(__FILE__).parent_path().parent_path() / "data" / "tf_records"; }

bool load_expected(nlohmann::json& out) {
  auto path = reference_dir() / "expected.json";
  if (!fs::exists(path)) {
    WARN("no TensorFlow reference files in " << reference_dir().string()
                                             << " (run scripts/make_tf_reference_records.py where tensorflow is installed)");
    return false;
  }
  std::ifstream in(path);
  out = nlohmann::json::parse(in);
  return true;
}

std::string base64_decode(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int v = value(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> read_payloads(const std::string& path, af::record_compression c) {
  auto reader = af::tfrecord_reader::open(path, {c});
  REQUIRE(reader.has_value());
  std::vector<std::string> out;
  for (;;) {
    auto rec = reader->next();
    INFO((rec ? std::string() : rec.error_value().message));
    REQUIRE(rec.has_value());
    if (!*rec) return out;
    out.push_back((*rec)->data);
  }
}

// The Example described by expected.json's {"name": {"bytes_list"|"float_list"|"int64_list": [...]}}.
af::example from_json(const nlohmann::json& described) {
  af::example ex;
  for (const auto& [name, f] : described.items()) {
    if (f.contains("bytes_list")) {
      std::vector<std::string> values;
      for (const auto& v : f["bytes_list"]) values.push_back(base64_decode(v.get<std::string>()));
      ex.features[name] = af::feature::bytes(std::move(values));
    } else if (f.contains("float_list")) {
      std::vector<float> values;
      for (const auto& v : f["float_list"]) values.push_back(static_cast<float>(v.get<double>()));
      ex.features[name] = af::feature::floats(std::move(values));
    } else {
      std::vector<int64_t> values;
      for (const auto& v : f["int64_list"]) values.push_back(v.get<int64_t>());
      ex.features[name] = af::feature::int64s(std::move(values));
    }
  }
  return ex;
}

}  // namespace

TEST_CASE("TensorFlow-written TFRecord files read back with the payloads and Examples it wrote", "[cpu]") {
  nlohmann::json expected;
  if (!load_expected(expected)) return;
  int files = 0;
  for (const auto& [name, entry] : expected["files"].items()) {
    INFO(name);
    auto c = af::parse_record_compression(entry["compression"].get<std::string>());
    REQUIRE(c.has_value());
    CHECK(af::compression_from_path(name) == *c);
    auto payloads = read_payloads((reference_dir() / name).string(), *c);
    REQUIRE(payloads.size() == entry["count"].get<std::size_t>());
    for (std::size_t i = 0; i < payloads.size(); ++i) CHECK(payloads[i] == base64_decode(entry["payloads"][i]));
    if (entry.contains("examples")) {
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        auto ex = af::decode_example(payloads[i]);
        INFO("record " << i << (ex ? std::string() : ": " + ex.error_value().message));
        REQUIRE(ex.has_value());
        CHECK(*ex == from_json(entry["examples"][i]));
      }
    }
    ++files;
  }
  CHECK(files >= 9);
}

TEST_CASE("our writer produces TensorFlow's uncompressed files byte for byte", "[cpu]") {
  nlohmann::json expected;
  if (!load_expected(expected)) return;
  auto out = fs::temp_directory_path() / ("af_tf_reference_" + std::to_string(::getpid()));
  for (const auto& [name, entry] : expected["files"].items()) {
    if (entry["compression"] != "none") continue;
    INFO(name);
    {
      auto writer = af::tfrecord_writer::open(out.string());
      REQUIRE(writer.has_value());
      for (const auto& p : entry["payloads"]) REQUIRE(writer->write(base64_decode(p.get<std::string>())).has_value());
      REQUIRE(writer->close().has_value());
    }
    CHECK(read_file(out) == read_file(reference_dir() / name));
  }
  fs::remove(out);
}

TEST_CASE("our encoding of TensorFlow's Examples decodes to the same Examples", "[cpu]") {
  nlohmann::json expected;
  if (!load_expected(expected)) return;
  const auto& entry = expected["files"]["examples.tfrecord"];
  for (std::size_t i = 0; i < entry["examples"].size(); ++i) {
    af::example ex = from_json(entry["examples"][i]);
    std::string ours = af::encode_example(ex);
    std::string theirs = base64_decode(entry["payloads"][i]);
    // Same length always (same fields, same packing); same bytes whenever TensorFlow happened to
    // order the map entries by name, as it does for one feature.
    CHECK(ours.size() == theirs.size());
    if (ex.features.size() <= 1) CHECK(ours == theirs);
    auto back = af::decode_example(ours);
    REQUIRE(back.has_value());
    CHECK(*back == ex);
  }
}
