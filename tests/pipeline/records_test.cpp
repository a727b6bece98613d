// TFRecord datasets: reading, parsing Examples, interleaving files, and every bad-input case naming
// the file, record, byte offset and feature.

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "pipeline/records.hpp"
#include "../support/scratch_dir.hpp"
#include "pipeline_test_util.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;
using af::testing::flip_byte;
using af::testing::scratch_dir;

namespace {


std::string example_bytes(int64_t label, std::size_t pixels = 12) {
  example ex;
  ex.features["image"] = feature::bytes({std::string(pixels, static_cast<char>(label))});
  ex.features["label"] = feature::int64s({label});
  return encode_example(ex);
}

// Writes labels [first, first + n) to `path`; returns each record's byte offset.
std::vector<uint64_t> write_labels(const std::string& path, int64_t first, int64_t n) {
  auto w = tfrecord_writer::open(path);
  REQUIRE(w.has_value());
  std::vector<uint64_t> offsets;
  uint64_t at = 0;
  for (int64_t i = first; i < first + n; ++i) {
    const auto bytes = (i == -1) ? std::string{"\x0a\x05garbage"} : example_bytes(i);
    offsets.push_back(at);
    at += 16 + bytes.size();
    REQUIRE(w->write(bytes).has_value());
  }
  REQUIRE(w->close().has_value());
  return offsets;
}

feature_spec image_spec() {
  return {{"image", fixed_len(dtype::u8, {12})}, {"label", fixed_len(dtype::i64, {})}};
}

}  // namespace

TEST_CASE("from_tfrecord reads every record with its origin and parses Examples", "[pipeline][records]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_records_pipeline"};
  write_labels(dir.file("a.tfrecord"), 0, 20);
  write_labels(dir.file("b.tfrecord"), 20, 15);
  auto raw = drain(rt, dataset::from_tfrecord({dir.file("a.tfrecord"), dir.file("b.tfrecord")}));
  REQUIRE(raw.size() == 35);
  CHECK(raw[21].origin.record == 1);
  CHECK(*raw[21].origin.file == dir.file("b.tfrecord"));
  auto parsed = drain(rt, dataset::from_tfrecord({dir.file("a.tfrecord"), dir.file("b.tfrecord")})
                              .map(parse_example_fn(image_spec()), 3));
  CHECK(values(parsed, "label") == iota(0, 35));
  CHECK(parsed[7].find("image")->to_vector<uint8_t>() == std::vector<uint8_t>(12, 7));
}

TEST_CASE("interleave over list_files reads files round-robin in blocks", "[pipeline][records]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_records_pipeline"};
  write_labels(dir.file("part-0.tfrecord"), 0, 5);
  write_labels(dir.file("part-1.tfrecord"), 100, 5);
  write_labels(dir.file("part-2.tfrecord"), 200, 3);
  auto ds = dataset::list_files(dir.file("part-*.tfrecord"))
                .interleave([](const element& f) -> expected<dataset> { return dataset::from_tfrecord(f); }, 2, 2)
                .map(parse_example_fn(image_spec()));
  CHECK(values(drain(rt, ds), "label") ==
        std::vector<int64_t>{0, 1, 100, 101, 2, 3, 102, 103, 4, 104, 200, 201, 202});
  CHECK_THAT(drain_error(rt, dataset::list_files(dir.file("nothing-*.tfrecord"))).message,
             Catch::Contains("no file matches"));
  // An interleave over elements that name no file fails the stream, naming the missing field.
  auto no_names = dataset::range(2).interleave(
      [](const element& e) -> expected<dataset> { return dataset::from_tfrecord(e); }, 2);
  CHECK_THAT(drain_error(rt, no_names).message, Catch::Contains("from_tfrecord") && Catch::Contains("'filename'"));
}

TEST_CASE("a wrong CRC or a truncated file names file, record and offset after the good records",
          "[pipeline][records]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_records_pipeline"};
  const auto path = dir.file("bad.tfrecord");
  const auto offsets = write_labels(path, 0, 10);
  flip_byte(path, offsets[6] + 20);  // inside record 6's data: its data CRC fails
  std::vector<element> before;
  auto err = drain_error(rt, dataset::from_tfrecord({path}).map(parse_example_fn(image_spec())), &before);
  CHECK(values(before, "label") == iota(0, 6));
  CHECK(err.code == errc::malformed_input);
  CHECK_THAT(err.message, Catch::Contains(path) && Catch::Contains("record 6") &&
                              Catch::Contains(std::to_string(offsets[6])) && Catch::Contains("CRC"));

  const auto cut = dir.file("cut.tfrecord");
  const auto cut_offsets = write_labels(cut, 0, 4);
  std::filesystem::resize_file(cut, cut_offsets[3] + 10);
  before.clear();
  err = drain_error(rt, dataset::from_tfrecord({cut}), &before);
  CHECK(before.size() == 3);
  CHECK_THAT(err.message, Catch::Contains(cut) && Catch::Contains("record 3") && Catch::Contains("truncated"));
}

TEST_CASE("malformed, missing and mistyped features name the feature and the record", "[pipeline][records]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_records_pipeline"};
  const auto path = dir.file("mixed.tfrecord");
  {
    auto w = tfrecord_writer::open(path);
    REQUIRE(w->write(example_bytes(0)).has_value());
    REQUIRE(w->write(std::string{"\x0a\x7f\x01"}).has_value());  // length runs past the end
    example no_label;
    no_label.features["image"] = feature::bytes({std::string(12, 'x')});
    REQUIRE(w->write(encode_example(no_label)).has_value());
    example float_label;
    float_label.features["image"] = feature::bytes({std::string(12, 'x')});
    float_label.features["label"] = feature::floats({1.5f});
    REQUIRE(w->write(encode_example(float_label)).has_value());
    REQUIRE(w->write(example_bytes(4)).has_value());
    REQUIRE(w->close().has_value());
  }
  auto parse = dataset::from_tfrecord({path}).map(parse_example_fn(image_spec()));
  std::vector<element> before;
  auto err = drain_error(rt, parse, &before);
  CHECK(before.size() == 1);
  CHECK_THAT(err.message, Catch::Contains(path) && Catch::Contains("record 1") && Catch::Contains("byte offset"));

  auto missing = drain_error(rt, dataset::from_tfrecord({path}).skip(2).map(parse_example_fn(image_spec())));
  CHECK_THAT(missing.message, Catch::Contains("record 2") && Catch::Contains("'label'"));
  auto mistyped = drain_error(rt, dataset::from_tfrecord({path}).skip(3).map(parse_example_fn(image_spec())));
  CHECK_THAT(mistyped.message, Catch::Contains("record 3") && Catch::Contains("'label'") && Catch::Contains("float"));

  // ignore_errors skips the three bad Examples and counts them.
  auto it = parse.ignore_errors().iterate(rt);
  std::vector<element> kept;
  for (auto& e : it) kept.push_back(e);
  CHECK(it.status().code == errc::none);
  CHECK(values(kept, "label") == std::vector<int64_t>{0, 4});
  CHECK(it.stats().skipped_errors == 3);
}

TEST_CASE("ignore_errors skips the rest of a corrupt file and goes on with the next", "[pipeline][records]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_records_pipeline"};
  const auto offsets = write_labels(dir.file("a.tfrecord"), 0, 5);
  write_labels(dir.file("b.tfrecord"), 10, 3);
  flip_byte(dir.file("a.tfrecord"), offsets[2] + 9);  // record 2's length CRC: framing lost
  auto it = dataset::from_tfrecord({dir.file("a.tfrecord"), dir.file("b.tfrecord"), dir.file("missing.tfrecord")})
                .map(parse_example_fn(image_spec()))
                .ignore_errors()
                .iterate(rt);
  std::vector<element> kept;
  for (auto& e : it) kept.push_back(e);
  CHECK(it.status().code == errc::none);
  CHECK(values(kept, "label") == std::vector<int64_t>{0, 1, 10, 11, 12});
  CHECK(it.stats().skipped_errors == 2);
  CHECK_THAT(it.stats().first_skipped_error, Catch::Contains("record 2"));
}
