// Saving an iterator mid-stream and resuming it yields exactly the remaining sequence.

#include <random>

#include "../support/scratch_dir.hpp"
#include "pipeline/iterator.hpp"
#include "pipeline/records.hpp"
#include "pipeline_test_util.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

// Takes `k` elements, saves, finishes; returns (the saved state, the values after the save).
std::pair<iterator_state, std::vector<int64_t>> split_at(runtime& rt, const dataset& ds, std::size_t k) {
  auto it = ds.iterate(rt);
  for (std::size_t i = 0; i < k; ++i) {
    auto next = it.next();
    REQUIRE(next.has_value());
    REQUIRE(next->has_value());
  }
  auto saved = it.save();
  std::vector<element> rest;
  for (auto& e : it) rest.push_back(e);
  REQUIRE(it.status().code == errc::none);
  return {saved, values(rest)};
}

// `files` TFRecord files part-<f>.tfrecord in `dir`, each of `per_file` Examples whose int64
// "value" is f * 1000 + record index.
void write_value_files(const af::testing::scratch_dir& dir, int files, int per_file) {
  for (int f = 0; f < files; ++f) {
    auto writer = tfrecord_writer::open(dir.file("part-" + std::to_string(f) + ".tfrecord"));
    REQUIRE(writer);
    for (int i = 0; i < per_file; ++i) {
      example ex;
      ex.features["value"] = feature::int64s({f * 1000 + i});
      REQUIRE(writer->write(encode_example(ex)));
    }
    REQUIRE(writer->close());
  }
}

std::vector<int64_t> resumed_values(runtime& rt, const dataset& ds, const iterator_state& saved) {
  auto restored = iterator_state::deserialize(saved.serialize());
  REQUIRE(restored.has_value());
  auto it = ds.resume(rt, *restored);
  REQUIRE(it.has_value());
  std::vector<element> rest;
  for (auto& e : *it) rest.push_back(e);
  REQUIRE(it->status().code == errc::none);
  return values(rest);
}

}  // namespace

TEST_CASE("resume after a save mid-stream yields the identical remaining sequence", "[pipeline][resume]") {
  runtime rt{test_runtime_options()};
  std::mt19937 rng{3};
  // Unseeded shuffles across epochs, a parallel ordered map, a batch and an unbatch, interleave.
  auto ds = dataset::range(1, 6)
                .interleave([](const element& e) -> expected<dataset> {
                  const int64_t i = e.find("value")->item<int64_t>();
                  return dataset::range(i * 100, i * 100 + 40);
                }, 3, 4)
                .shuffle(64)
                .map([](element e) -> expected<element> {
                  e.set("value", tensor::scalar<int64_t>(e.find("value")->item<int64_t>() * 2));
                  return e;
                }, 3)
                .repeat(2)
                .batch(5)
                .unbatch();
  for (int round = 0; round < 4; ++round) {
    const std::size_t k = std::uniform_int_distribution<std::size_t>{0, 400}(rng);
    auto [saved, rest] = split_at(rt, ds, k);
    INFO("saved after " << k);
    CHECK(saved.consumed == k);
    CHECK(resumed_values(rt, ds, saved) == rest);
  }
}

TEST_CASE("a saved state is refused by another pipeline and malformed text is named", "[pipeline][resume]") {
  runtime rt{test_runtime_options()};
  auto [saved, rest] = split_at(rt, dataset::range(10).shuffle(4), 3);
  CHECK(rest.size() == 7);
  auto other = dataset::range(10).shuffle(5).resume(rt, saved);
  REQUIRE_FALSE(other.has_value());
  CHECK_THAT(other.error_value().message, Catch::Contains("another pipeline"));
  CHECK_THAT(iterator_state::deserialize("hello").error_value().message, Catch::Contains("iterator state"));
  auto text = saved.serialize();
  CHECK_THAT(iterator_state::deserialize(text.substr(0, text.size() - 2)).error_value().message,
             Catch::Contains("iterator state"));
  const auto header_end = text.find("digraph");
  CHECK_THAT(iterator_state::deserialize(text.substr(0, header_end + 5)).error_value().message,
             Catch::Contains("fingerprint"));
}

TEST_CASE("resume over TFRecord files continues with exactly the remaining records, in order", "[pipeline][resume]") {
  runtime rt{test_runtime_options()};
  af::testing::scratch_dir dir{"af_resume_records"};
  write_value_files(dir, 3, 25);
  // The README's shape: records parsed by a parallel map, an unseeded shuffle, batches.
  auto ds = dataset::from_tfrecord({dir.file("part-0.tfrecord"), dir.file("part-1.tfrecord"), dir.file("part-2.tfrecord")})
                .map(data::parse_example_fn({{"value", fixed_len(dtype::i64, {})}}), 3)
                .shuffle(20)
                .batch(4);
  for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{18}, std::size_t{19}}) {
    INFO("saved after " << k << " batches");
    auto [saved, rest] = split_at(rt, ds, k);
    CHECK(saved.consumed == k);
    CHECK(rest.size() == 75 - std::min<std::size_t>(75, 4 * k));
    CHECK(resumed_values(rt, ds, saved) == rest);
  }
}

TEST_CASE("resume over an interleave of TFRecord files continues with exactly the remaining records, in order",
          "[pipeline][resume]") {
  runtime rt{test_runtime_options()};
  af::testing::scratch_dir dir{"af_resume_interleave"};
  write_value_files(dir, 4, 30);
  auto ds = dataset::list_files(dir.file("part-*.tfrecord"))
                .interleave([](const element& f) -> expected<dataset> { return dataset::from_tfrecord(f); },
                            /*cycle_length=*/3, /*block_length=*/4)
                .map(data::parse_example_fn({{"value", fixed_len(dtype::i64, {})}}), 2);
  // Without a shuffle the order is the interleave's own: 4 from each of three files in turn.
  auto [none_taken, everything] = split_at(rt, ds, 0);
  REQUIRE(everything.size() == 120);
  CHECK(std::vector<int64_t>(everything.begin(), everything.begin() + 6) == std::vector<int64_t>{0, 1, 2, 3, 1000, 1001});
  for (std::size_t k : {std::size_t{5}, std::size_t{37}, std::size_t{90}, std::size_t{119}, std::size_t{120}}) {
    INFO("saved after " << k << " records");
    auto [saved, rest] = split_at(rt, ds, k);
    CHECK(rest == std::vector<int64_t>(everything.begin() + static_cast<std::ptrdiff_t>(k), everything.end()));
    CHECK(resumed_values(rt, ds, saved) == rest);
  }
  CHECK(resumed_values(rt, ds, none_taken) == everything);
}
