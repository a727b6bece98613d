// `actorflow records count|verify|cat` as the README shows them: on files TensorFlow itself wrote
// (tests/data/tf_records with expected.json), and on corrupt, truncated, missing and non-Example
// files, which must end with an error naming the file, record and offset and exit code 1.

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/scratch_dir.hpp"
#include "cli_test_support.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

using namespace af;
using namespace af::testing;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path tf_records_dir{AF_TF_RECORDS_DIR};

nlohmann::json expected_description() {
  std::ifstream in{tf_records_dir / "expected.json"};
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

// The Examples a file of expected.json holds: its own list, or the shared one for the files
// marked with a "serialization" (the same Examples in another map order); null for raw files.
const nlohmann::json* examples_of(const nlohmann::json& description, const nlohmann::json& file) {
  if (file.contains("examples")) return &file["examples"];
  if (file.contains("serialization") && description.contains("examples")) return &description["examples"];
  return nullptr;
}

// One line of `records cat` against expected.json's description of the same Example: equal
// names, kinds and values; floats compared as the float32 values both texts stand for.
void check_same_example(const nlohmann::json& got, const nlohmann::json& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, feature] : want.items()) {
    INFO("feature " << name);
    REQUIRE(got.contains(name));
    if (feature.contains("float_list")) {
      const auto& a = got[name]["float_list"];
      const auto& b = feature["float_list"];
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].get<float>() == static_cast<float>(b[i].get<double>()));
    } else {
      CHECK(got[name] == feature);
    }
  }
}

std::string example_payload(int64_t label) {
  example ex;
  ex.features["label"] = feature::int64s({label});
  ex.features["name"] = feature::bytes({"item " + std::to_string(label)});
  return encode_example(ex);
}

// Writes `payloads` to `path`; returns each record's byte offset.
std::vector<uint64_t> write_records(const std::string& path, const std::vector<std::string>& payloads) {
  auto writer = tfrecord_writer::open(path);
  REQUIRE(writer);
  std::vector<uint64_t> offsets;
  uint64_t at = 0;
  for (const auto& p : payloads) {
    offsets.push_back(at);
    at += 16 + p.size();  // length, its CRC, the data, its CRC
    REQUIRE(writer->write(p));
  }
  REQUIRE(writer->close());
  return offsets;
}

std::vector<std::string> labelled_payloads(int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(example_payload(i));
  return out;
}

}  // namespace

TEST_CASE("actorflow records count, verify and cat read the files TensorFlow wrote", "[cli][records]") {
  scratch_dir cwd{"af_cli_records"};
  const auto description = expected_description();
  const auto& files = description["files"];
  std::vector<std::string> all_paths;
  uint64_t total = 0;
  for (const auto& [name, entry] : files.items()) {
    INFO(name);
    const std::string path = (tf_records_dir / name).string();
    const auto count = entry["count"].get<uint64_t>();
    all_paths.push_back(path);
    total += count;

    auto verified = actorflow({"records", "verify", path}, cwd.path);
    INFO(describe(verified));
    CHECK(verified.exit_code == 0);
    CHECK_THAT(verified.out, Contains("verified " + std::to_string(count) + " records (") &&
                                 Contains(" in 1 file: every CRC is correct"));

    // --raw prints each payload in base64, exactly as expected.json holds them.
    auto raw = actorflow({"records", "cat", "--raw", path}, cwd.path);
    INFO(describe(raw));
    CHECK(raw.exit_code == 0);
    std::vector<std::string> payloads;
    for (const auto& p : entry["payloads"]) payloads.push_back(p.get<std::string>());
    CHECK(lines_of(raw.out) == payloads);

    if (const auto* examples = examples_of(description, entry)) {
      auto cat = actorflow({"records", "cat", path}, cwd.path);
      INFO(describe(cat));
      CHECK(cat.exit_code == 0);
      const auto lines = lines_of(cat.out);
      REQUIRE(lines.size() == count);
      for (std::size_t i = 0; i < lines.size(); ++i) {
        INFO("record " << i << ": " << lines[i]);
        check_same_example(nlohmann::json::parse(lines[i]), (*examples)[i]);
      }
    }
  }
  REQUIRE(all_paths.size() >= 9);

  // Several files at once, compression told by each extension: a line per file, then the total.
  std::vector<std::string> args{"records", "count"};
  args.insert(args.end(), all_paths.begin(), all_paths.end());
  auto counted = actorflow(args, cwd.path);
  INFO(describe(counted));
  CHECK(counted.exit_code == 0);
  const auto lines = lines_of(counted.out);
  REQUIRE(lines.size() == all_paths.size() + 1);
  std::size_t file = 0;
  for (const auto& [name, entry] : files.items()) {
    CHECK(lines[file] == all_paths[file] + "\t" + std::to_string(entry["count"].get<uint64_t>()));
    ++file;
  }
  CHECK(lines.back() == "total\t" + std::to_string(total));
}

TEST_CASE("actorflow records names the file, record and offset of a corrupt record and exits with 1",
          "[cli][records]") {
  scratch_dir cwd{"af_cli_records"};
  const std::string path = cwd.file("bad.tfrecord");
  const auto offsets = write_records(path, labelled_payloads(10));
  flip_byte(path, offsets[6] + 14);  // inside record 6's data: its data CRC no longer matches
  const std::string place = path + ": record 6 at offset " + std::to_string(offsets[6]);

  auto verified = actorflow({"records", "verify", path}, cwd.path);
  INFO(describe(verified));
  CHECK(verified.exit_code == 1);
  CHECK_THAT(verified.err, Contains(place) && Contains("wrong data CRC"));
  CHECK(verified.out.empty());

  // cat prints the good records before the bad one, then stops.
  auto cat = actorflow({"records", "cat", path}, cwd.path);
  INFO(describe(cat));
  CHECK(cat.exit_code == 1);
  CHECK_THAT(cat.err, Contains(place) && Contains("wrong data CRC"));
  const auto lines = lines_of(cat.out);
  REQUIRE(lines.size() == 6);
  CHECK(nlohmann::json::parse(lines[5])["label"]["int64_list"][0] == 5);

  // count reads lengths only (their own CRCs are checked, the data's are not): still ten.
  auto counted = actorflow({"records", "count", path}, cwd.path);
  INFO(describe(counted));
  CHECK(counted.exit_code == 0);
  CHECK_THAT(counted.out, Contains(path + "\t10\ntotal\t10\n"));
}

TEST_CASE("actorflow records reports truncated, missing and non-Example files and bad usage", "[cli][records]") {
  scratch_dir cwd{"af_cli_records"};
  SECTION("a file cut inside its fourth record") {
    const std::string path = cwd.file("cut.tfrecord");
    const auto offsets = write_records(path, labelled_payloads(4));
    fs::resize_file(path, offsets[3] + 10);
    for (const char* action : {"count", "verify", "cat"}) {
      auto r = actorflow({"records", action, path}, cwd.path);
      INFO(action << ": " << describe(r));
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.err, Contains(path) && Contains("truncated") && Contains("record 3") &&
                            Contains("offset " + std::to_string(offsets[3])));
    }
  }
  SECTION("a file that is not there") {
    auto r = actorflow({"records", "verify", cwd.file("absent.tfrecord")}, cwd.path);
    INFO(describe(r));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains("cannot open " + cwd.file("absent.tfrecord")));
  }
  SECTION("records that are not Examples: cat says so and points to --raw") {
    const std::string path = cwd.file("raw.tfrecord");
    const auto offsets = write_records(path, {example_payload(1), std::string{"\x0a\x7f\x01"}});
    auto cat = actorflow({"records", "cat", path}, cwd.path);
    INFO(describe(cat));
    CHECK(cat.exit_code == 1);
    CHECK(lines_of(cat.out).size() == 1);
    CHECK_THAT(cat.err, Contains(path + ": record 1 at offset " + std::to_string(offsets[1])) &&
                            Contains("is not a tf.train.Example") && Contains("--raw"));
    auto raw = actorflow({"records", "cat", "--raw", path}, cwd.path);
    CHECK(raw.exit_code == 0);
    CHECK(lines_of(raw.out).size() == 2);
    CHECK(actorflow({"records", "verify", path}, cwd.path).exit_code == 0);
  }
  SECTION("usage errors exit with 2 and print the usage") {
    for (std::vector<std::string> args : {std::vector<std::string>{"records"}, {"records", "count"},
                                          {"records", "frobnicate", "x.tfrecord"},
                                          {"records", "count", "--compression", "lz4", "x.tfrecord"},
                                          {"records", "verify", "--raw", "x.tfrecord"}}) {
      auto r = actorflow(args, cwd.path);
      INFO(command_line(args) << ": " << describe(r));
      CHECK(r.exit_code == 2);
      CHECK_FALSE(r.err.empty());
      CHECK(r.out.empty());
    }
  }
}
