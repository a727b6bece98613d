// Checks against files that TensorFlow itself wrote (scripts/make_tf_reference_records.py puts
// them in tests/data/tf_records with expected.json). The files are committed, so the tests need no
// TensorFlow, and a folder not found fails them: with a warning instead, they passed without
// checking anything whenever the relative __FILE__ of a scripts/build compile did not resolve.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

namespace fs = std::filesystem;

namespace {

// tests/<relative> in the source tree (tests/CMakeLists.txt defines AF_TESTS_DIR: __FILE__ is
// relative to the build tree when scripts/build compiles through ccache).
fs::path tests_folder(const std::string& relative) { return fs::path(AF_TESTS_DIR) / relative; }

fs::path reference_dir() { return tests_folder("data/tf_records"); }

bool load_expected(nlohmann::json& out) {
  auto path = reference_dir() / "expected.json";
  if (!fs::exists(path)) {
    FAIL("no TensorFlow reference files in " << reference_dir().string()
                                             << " (committed; scripts/make_tf_reference_records.py rewrites them)");
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

// The Example described by expected.json's {"name": {"bytes_list"|"float_list"|"int64_list": [...]}}
// ({} for a Feature with no list set).
af::example from_json(const nlohmann::json& described) {
  af::example ex;
  for (const auto& [name, f] : described.items()) {
    if (f.empty()) {
      ex.features[name] = af::feature{};
    } else if (f.contains("bytes_list")) {
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

// The map entries of a serialized Example (field 1, Features; its field 1, repeated entries), each
// with its tag and length bytes, sorted. Written out here rather than taken from our decoder, so
// that it checks the encoder independently; it accepts only what an encoder writes (no unknown
// fields, one-byte tags).
std::vector<std::string> sorted_map_entries(std::string_view bytes) {
  auto varint = [&](std::size_t& at) {
    uint64_t v = 0;
    for (int shift = 0; at < bytes.size(); shift += 7) {
      const auto b = static_cast<uint8_t>(bytes[at++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    FAIL("varint runs past the end");
    return v;
  };
  std::vector<std::string> entries;
  std::size_t at = 0;
  if (bytes.empty()) return entries;
  REQUIRE(bytes[at++] == 0x0a);  // Example.features
  const std::size_t features_end = at + varint(at);
  REQUIRE(features_end == bytes.size());
  while (at < features_end) {
    const std::size_t start = at;
    REQUIRE(bytes[at++] == 0x0a);  // Features.feature entry
    at += varint(at);
    REQUIRE(at <= features_end);
    entries.emplace_back(bytes.substr(start, at - start));
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

// Whether no feature name is a proper prefix of another.
bool keys_prefix_free(const af::example& ex) {
  for (const auto& [a, fa] : ex.features)
    for (const auto& [b, fb] : ex.features)
      if (a.size() < b.size() && b.compare(0, a.size(), a) == 0) return false;
  return true;
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
    if (entry.contains("serialization")) {  // an Example file, in either map order
      REQUIRE(payloads.size() == expected["examples"].size());
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        auto ex = af::decode_example(payloads[i]);
        INFO("record " << i << (ex ? std::string() : ": " + ex.error_value().message));
        REQUIRE(ex.has_value());
        CHECK(*ex == from_json(expected["examples"][i]));
      }
    }
    ++files;
  }
  CHECK(files >= 12);
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

// How TensorFlow (Python, protobuf's upb) orders an Example's map entries:
//   SerializeToString()                 as its hash table holds them, seeded per process: the
//                                       order changes from run to run;
//   SerializeToString(deterministic=True) sorted by key bytes, except that a key which is a prefix
//                                       of another comes after it ("ab" before "a": upb sorts by
//                                       negated memcmp with shorter keys first and emits in reverse).
// Our encoder writes entries in std::string order ("a" before "ab", as C++ protobuf's deterministic
// serialization does). Neither order is canonical in protobuf, so the valid comparison is entry
// by entry: each map entry (key and Feature, with its tag and length) byte for byte as a set, the
// envelope by its length; and whole-message byte identity against the deterministic bytes where
// no key is a prefix of another, so that upb's order is plain byte order.
TEST_CASE("our encoding of TensorFlow's Examples matches its bytes map entry by map entry", "[cpu]") {
  nlohmann::json expected;
  if (!load_expected(expected)) return;
  const auto& deterministic = expected["files"]["examples_deterministic.tfrecord"];
  const auto& by_hash_order = expected["files"]["examples.tfrecord"];
  REQUIRE(deterministic["serialization"] == "deterministic");
  REQUIRE(by_hash_order["serialization"] == "default");
  const auto& examples = expected["examples"];
  REQUIRE(examples.size() >= 6);
  std::size_t several_prefix_free = 0, several_with_prefixes = 0;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    INFO("Example " << i);
    af::example ex = from_json(examples[i]);
    const std::string ours = af::encode_example(ex);
    const auto our_entries = sorted_map_entries(ours);
    REQUIRE(our_entries.size() == ex.features.size());
    for (const auto* theirs : {&deterministic, &by_hash_order}) {
      const std::string bytes = base64_decode((*theirs)["payloads"][i]);
      INFO("TensorFlow's " << (*theirs)["serialization"].get<std::string>() << " serialization");
      CHECK(ours.size() == bytes.size());
      CHECK(our_entries == sorted_map_entries(bytes));
    }
    const std::string tf_deterministic = base64_decode(deterministic["payloads"][i]);
    if (keys_prefix_free(ex)) {
      CHECK(ours == tf_deterministic);
      if (ex.features.size() >= 5) ++several_prefix_free;
    } else {
      CHECK(ours != tf_deterministic);  // the order upb gives prefixes; if this fails, upb changed
      ++several_with_prefixes;
    }
    if (ex.features.size() <= 1) CHECK(ours == base64_decode(by_hash_order["payloads"][i]));
    auto back = af::decode_example(ours);
    REQUIRE(back.has_value());
    CHECK(*back == ex);
  }
  CHECK(several_prefix_free >= 1);
  CHECK(several_with_prefixes >= 1);
}

TEST_CASE("the reference Examples hold several features of every kind, empty lists and long lists", "[cpu]") {
  nlohmann::json expected;
  if (!load_expected(expected)) return;
  // What the byte-identity test above stands on: guard the coverage against a thinner script.
  std::map<af::feature_kind, int> kinds, empty_kinds;
  std::size_t longest = 0;
  for (const auto& described : expected["examples"]) {
    for (const auto& [name, f] : from_json(described).features) {
      ++kinds[f.kind()];
      if (f.size() == 0 && f.kind() != af::feature_kind::none) ++empty_kinds[f.kind()];
      longest = std::max(longest, f.size());
    }
  }
  for (auto k : {af::feature_kind::bytes_list, af::feature_kind::float_list, af::feature_kind::int64_list}) {
    INFO(af::to_string(k));
    CHECK(kinds[k] >= 4);
    CHECK(empty_kinds[k] >= 1);
  }
  CHECK(kinds[af::feature_kind::none] >= 1);
  CHECK(longest >= 128);  // a list length needing a two-byte varint
}
