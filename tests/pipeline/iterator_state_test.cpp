// Iterator state instead of replay: a save snapshots every stage (positions, shuffle buffers,
// partial batches, counters, elements on their way) and a resume restores them, so it reads only
// what follows the saved position.

#include <algorithm>
#include <random>

#include "../support/scratch_dir.hpp"
#include "pipeline/iterator.hpp"
#include "pipeline/records.hpp"
#include "state_test_util.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

// Resumes `saved` (through its serialized form) and reads everything.
std::vector<int64_t> resume_all(runtime& rt, const dataset& ds, const iterator_state& saved) {
  auto restored = iterator_state::deserialize(saved.serialize());
  REQUIRE(restored.has_value());
  REQUIRE(restored->stages.has_value());
  auto it = ds.resume(rt, *restored);
  REQUIRE(it.has_value());
  return rest_of(*it);
}

dataset mapped_twice(dataset ds, int64_t parallelism) {
  return ds.map([](element e) -> expected<element> {
    e.set("value", tensor::scalar<int64_t>(e.find("value")->item<int64_t>() * 2));
    return e;
  }, parallelism);
}

}  // namespace

TEST_CASE("a saved iterator holds its stages' state and the resume continues exactly", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  std::mt19937 rng{11};
  const std::vector<std::pair<const char*, dataset>> cases = {
      {"range, ordered parallel map, shuffle, batch, unbatch",
       mapped_twice(dataset::range(0, 3000), 3).shuffle(100).batch(7).unbatch()},
      {"filter, enumerate, skip, take, shard",
       dataset::range(0, 5000)
           .filter([](const element& e) -> expected<bool> { return e.find("value")->item<int64_t>() % 3 != 0; })
           .enumerate(10, "index")
           .skip(17)
           .take(2500)
           .shard(2, 1)},
      {"slices, seeded shuffle, padded batch, prefetch",
       dataset::from_tensor_slices(element{{"value", tensor::from_vector(iota(0, 2000))}})
           .shuffle(64, 5)
           .batch(9)
           .prefetch(3)
           .unbatch()},
  };
  for (const auto& [name, ds] : cases) {
    const auto everything = values(drain(rt, ds.shuffle(1)));  // shuffle(1) keeps the order: a fresh run
    for (int round = 0; round < 3; ++round) {
      auto it = ds.iterate(rt);
      const auto total = everything.size();
      const std::size_t k = std::uniform_int_distribution<std::size_t>{0, total}(rng);
      INFO(name << ": saved after " << k);
      auto before = take_values(it, k);
      auto saved = it.save();
      REQUIRE(saved.stages.has_value());
      CHECK(saved.replay_reason.empty());
      CHECK(saved.consumed == k);
      auto rest = rest_of(it);  // the saved iterator goes on: nothing lost or repeated by saving
      CHECK(before.size() + rest.size() == total);
      CHECK(resume_all(rt, ds, saved) == rest);
    }
  }
}

TEST_CASE("a resume reads only what follows the saved position", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  auto ds = mapped_twice(dataset::range(0, 100000), 2).shuffle(500).batch(10);
  auto it = ds.iterate(rt);
  take_values(it, 9000);  // 90% of the epoch
  auto saved = it.save();
  REQUIRE(saved.stages.has_value());
  // The source's saved position is past what was read, and the shuffle keeps its buffer.
  REQUIRE(saved.stages->stages.size() == 4);
  CHECK(saved.stages->stages[2].stage == "shuffle");
  CHECK(saved.stages->stages[2].held.size() == 500);
  auto resumed = ds.resume(rt, saved);
  REQUIRE(resumed.has_value());
  auto rest = rest_of(*resumed);
  CHECK(rest.size() + 90000 == 100000);
  const auto counters = resumed->counters();
  INFO("the resumed source generated " << counters.front().items_in);
  CHECK(counters.front().items_in <= 10000);  // a replay would generate 100000
}

TEST_CASE("saving twice, at the start and after the end", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(0, 300).shuffle(50, 3).batch(4).unbatch();
  const auto everything = values(drain(rt, ds));
  auto it = ds.iterate(rt);
  auto at_start = it.save();
  CHECK(resume_all(rt, ds, at_start) == everything);
  take_values(it, 100);
  auto first = it.save();
  auto second = it.save();  // nothing consumed between: the same position
  CHECK(resume_all(rt, ds, first) == resume_all(rt, ds, second));
  take_values(it, 150);
  auto third = it.save();
  CHECK(resume_all(rt, ds, third) == std::vector<int64_t>(everything.begin() + 250, everything.end()));
  CHECK(rest_of(it) == std::vector<int64_t>(everything.begin() + 250, everything.end()));
  auto after_end = it.save();
  CHECK(resume_all(rt, ds, after_end).empty());
}

TEST_CASE("an unordered parallel map saves too: every element exactly once", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(0, 2000).map([](element e) -> expected<element> { return e; }, 4, /*deterministic=*/false);
  auto it = ds.iterate(rt);
  auto seen = take_values(it, 700);
  auto saved = it.save();
  REQUIRE(saved.stages.has_value());
  auto rest = resume_all(rt, ds, saved);
  seen.insert(seen.end(), rest.begin(), rest.end());
  std::sort(seen.begin(), seen.end());
  CHECK(seen == iota(0, 2000));
}

TEST_CASE("TFRecord files resume at the saved file and byte offset", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  af::testing::scratch_dir dir{"af_state_records"};
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    files.push_back(dir.file("part-" + std::to_string(f) + (f == 1 ? ".tfrecord.gz" : ".tfrecord")));
    auto writer = tfrecord_writer::open(files.back(), f == 1 ? record_compression::gzip : record_compression::none);
    REQUIRE(writer);
    for (int i = 0; i < 40; ++i) {
      example ex;
      ex.features["value"] = feature::int64s({f * 1000 + i});
      REQUIRE(writer->write(encode_example(ex)));
    }
    REQUIRE(writer->close());
  }
  auto ds = dataset::from_tfrecord(files).map(parse_example_fn({{"value", fixed_len(dtype::i64, {})}}), 2).batch(3);
  const auto everything = values(drain(rt, ds));
  REQUIRE(everything.size() == 120);
  for (std::size_t k : {std::size_t{0}, std::size_t{5}, std::size_t{13}, std::size_t{27}, std::size_t{39}, std::size_t{40}}) {
    INFO("saved after " << k << " batches");
    auto it = ds.iterate(rt);
    take_values(it, k);
    auto saved = it.save();
    REQUIRE(saved.stages.has_value());
    CHECK(resume_all(rt, ds, saved) == std::vector<int64_t>(everything.begin() + static_cast<std::ptrdiff_t>(3 * k), everything.end()));
  }
  // Elements restored from a state still name where they came from.
  auto it = ds.unbatch().iterate(rt);
  take_values(it, 50);
  auto saved = it.save();
  auto resumed = ds.unbatch().resume(rt, saved);
  REQUIRE(resumed.has_value());
  auto first = resumed->next();
  REQUIRE(first.has_value());
  REQUIRE(first->has_value());
}

TEST_CASE("pipelines with a stage that cannot save resume by replay and say why", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  auto generated = dataset::from_generator("numbers", [] {
    return generator_fn{[i = int64_t{0}]() mutable -> expected<std::optional<element>> {
      if (i >= 50) return std::optional<element>{};
      return std::optional<element>{element{{"value", tensor::scalar<int64_t>(i++)}}};
    }};
  });
  auto cached = dataset::range(0, 40).cache();
  for (const auto& [ds, why] : {std::pair{generated.batch(2), "numbers"}, std::pair{cached, "cache"}}) {
    const auto everything = values(drain(rt, ds));
    auto it = ds.iterate(rt);
    take_values(it, 10);
    auto saved = it.save();
    CHECK_FALSE(saved.stages.has_value());
    CHECK_THAT(saved.replay_reason, Catch::Contains(why));
    auto restored = iterator_state::deserialize(saved.serialize());
    REQUIRE(restored.has_value());
    CHECK(restored->replay_reason == saved.replay_reason);
    auto resumed = ds.resume(rt, *restored);
    REQUIRE(resumed.has_value());
    const auto expected_rest = std::vector<int64_t>(everything.begin() + (ds.root() == cached.root() ? 10 : 20), everything.end());
    CHECK(rest_of(*resumed) == expected_rest);
    CHECK(rest_of(it) == expected_rest);
  }
}

TEST_CASE("a damaged iterator state is refused, never a crash", "[pipeline][resume][state]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(0, 500).shuffle(30, 1).batch(4);
  auto it = ds.iterate(rt);
  take_values(it, 20);
  const auto saved = it.save();
  const std::string text = saved.serialize();
  const auto rest = resume_all(rt, ds, saved);
  check_damage_is_refused(rt, ds, text, 7, 4);
  // A state whose stage does not fit is named.
  auto wrong = saved;
  wrong.stages->stages.back().stage = "unbatch";
  auto refused = ds.resume(rt, wrong);
  REQUIRE_FALSE(refused.has_value());
  CHECK_THAT(refused.error_value().message, Catch::Contains("unbatch"));
  auto too_big = saved;
  too_big.stages->stages[1].held.resize(40);
  too_big.pending.clear();  // else they come first
  auto failed = ds.resume(rt, too_big);
  REQUIRE(failed.has_value());
  auto first = failed->next();
  REQUIRE_FALSE(first.has_value());
  CHECK_THAT(first.error_value().message, Catch::Contains("shuffle"));
}
