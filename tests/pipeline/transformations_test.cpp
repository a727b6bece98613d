// Every transformation against a sequential reference computed in the test.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <map>
#include <random>

#include "pipeline_test_util.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;

namespace {

element times(element e, int64_t k) {
  const int64_t v = e.find("value")->item<int64_t>();
  e.set("value", tensor::scalar<int64_t>(v * k));
  return e;
}

}  // namespace

TEST_CASE("range, take, skip, shard and enumerate match their sequential definitions", "[pipeline]") {
  runtime rt{test_runtime_options()};
  CHECK(values(drain(rt, dataset::range(10))) == iota(0, 10));
  CHECK(values(drain(rt, dataset::range(3, 20, 4))) == std::vector<int64_t>{3, 7, 11, 15, 19});
  CHECK(values(drain(rt, dataset::range(5, 0, -2))) == std::vector<int64_t>{5, 3, 1});
  CHECK(values(drain(rt, dataset::range(100).take(7))) == iota(0, 7));
  CHECK(values(drain(rt, dataset::range(100).take(0))).empty());
  CHECK(values(drain(rt, dataset::range(10).skip(4))) == iota(4, 10));
  CHECK(values(drain(rt, dataset::range(10).skip(40))).empty());
  CHECK(values(drain(rt, dataset::range(10).shard(3, 1))) == std::vector<int64_t>{1, 4, 7});
  auto enumerated = drain(rt, dataset::range(10, 15).enumerate(100));
  CHECK(values(enumerated, "index") == iota(100, 105));
  CHECK(values(enumerated) == iota(10, 15));
  // take on an endless input ends the stream (and stops everything upstream).
  CHECK(values(drain(rt, dataset::range(3).repeat().take(8))) == std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1});
}

TEST_CASE("map and filter equal the sequential reference for random parallelism", "[pipeline]") {
  runtime rt{test_runtime_options()};
  std::mt19937 rng{7};
  for (int round = 0; round < 6; ++round) {
    const int64_t n = std::uniform_int_distribution<int64_t>{0, 300}(rng);
    const int64_t parallelism = std::uniform_int_distribution<int64_t>{1, 6}(rng);
    auto ds = dataset::range(n)
                  .map([](element e) -> expected<element> { return times(std::move(e), 3); }, parallelism)
                  .filter([](const element& e) -> expected<bool> { return e.find("value")->item<int64_t>() % 2 == 0; });
    std::vector<int64_t> expect;
    for (int64_t i = 0; i < n; ++i)
      if ((3 * i) % 2 == 0) expect.push_back(3 * i);
    INFO("n " << n << " parallelism " << parallelism);
    CHECK(values(drain(rt, ds)) == expect);
    auto unordered = values(drain(rt, dataset::range(n).map(
        [](element e) -> expected<element> { return times(std::move(e), 3); }, parallelism, false)));
    std::sort(unordered.begin(), unordered.end());
    std::vector<int64_t> all;
    for (int64_t i = 0; i < n; ++i) all.push_back(3 * i);
    CHECK(unordered == all);
  }
}

TEST_CASE("batch stacks fields and keeps or drops the remainder, and unbatch inverts it", "[pipeline]") {
  runtime rt{test_runtime_options()};
  std::mt19937 rng{11};
  for (int round = 0; round < 5; ++round) {
    const int64_t n = std::uniform_int_distribution<int64_t>{1, 100}(rng);
    const auto size = std::uniform_int_distribution<std::size_t>{1, 12}(rng);
    auto batches = drain(rt, dataset::range(n).batch(size));
    CHECK(batches.size() == static_cast<std::size_t>((n + static_cast<int64_t>(size) - 1) / static_cast<int64_t>(size)));
    CHECK(values(batches) == iota(0, n));
    CHECK(batches.front().find("value")->shape() == shape{std::min<int64_t>(n, static_cast<int64_t>(size))});
    auto dropped = drain(rt, dataset::range(n).batch(size, true));
    CHECK(dropped.size() == static_cast<std::size_t>(n / static_cast<int64_t>(size)));
    CHECK(values(drain(rt, dataset::range(n).batch(size).unbatch())) == iota(0, n));
  }
}

TEST_CASE("batch names the field whose shapes disagree", "[pipeline]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::range(4).map([](element e) -> expected<element> {
    const int64_t v = e.find("value")->item<int64_t>();
    e.set("vec", *tensor::zeros({v == 2 ? 3 : 2}, dtype::f32));
    return e;
  }).batch(4);
  auto err = drain_error(rt, ds);
  CHECK(err.code == errc::shape_mismatch);
  CHECK_THAT(err.message, Catch::Contains("field 'vec'") && Catch::Contains("[3]") && Catch::Contains("[2]"));
}

TEST_CASE("padded_batch pads each field to the longest in the batch or to a given shape", "[pipeline]") {
  runtime rt{test_runtime_options()};
  auto ragged = dataset::range(1, 5).map([](element e) -> expected<element> {
    const int64_t v = e.find("value")->item<int64_t>();
    std::vector<int64_t> row(static_cast<std::size_t>(v), v);
    e.set("row", tensor::from_vector(row));
    return e;
  });
  auto batches = drain(rt, ragged.padded_batch(2, {}, -1));
  REQUIRE(batches.size() == 2);
  CHECK(batches[0].find("row")->to_vector<int64_t>() == std::vector<int64_t>{1, -1, 2, 2});
  CHECK(batches[1].find("row")->to_vector<int64_t>() == std::vector<int64_t>{3, 3, 3, -1, 4, 4, 4, 4});
  auto fixed = drain(rt, ragged.padded_batch(4, {{"row", shape{6}}}));
  REQUIRE(fixed.size() == 1);
  CHECK(fixed[0].find("row")->shape() == shape{4, 6});
  CHECK(fixed[0].find("row")->to_vector<int64_t>()[6] == 2);
  auto err = drain_error(rt, ragged.padded_batch(4, {{"row", shape{3}}}));
  CHECK_THAT(err.message, Catch::Contains("field 'row'"));
}

TEST_CASE("from_tensor_slices yields rows, and zip joins fields and stops at the shortest", "[pipeline]") {
  runtime rt{test_runtime_options()};
  element columns{{"x", tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2})},
                  {"y", tensor::from_vector<int64_t>({7, 8, 9})}};
  auto rows = drain(rt, dataset::from_tensor_slices(columns));
  REQUIRE(rows.size() == 3);
  CHECK(rows[1].find("x")->to_vector<float>() == std::vector<float>{3, 4});
  CHECK(rows[2].find("y")->item<int64_t>() == 9);
  element bad{{"x", *tensor::zeros({3}, dtype::f32)}, {"y", *tensor::zeros({4}, dtype::f32)}};
  CHECK_THAT(drain_error(rt, dataset::from_tensor_slices(bad)).message, Catch::Contains("field 'y' has 4 rows"));

  auto zipped = drain(rt, dataset::zip({dataset::range(5), dataset::range(100, 103).enumerate(0, "i")
                                                           .map([](element e) -> expected<element> {
                                                             element out{{"other", *e.find("value")}, {"i", *e.find("i")}};
                                                             return out;
                                                           })}));
  CHECK(values(zipped) == iota(0, 3));
  CHECK(values(zipped, "other") == iota(100, 103));
  CHECK_THAT(drain_error(rt, dataset::zip({dataset::range(3), dataset::range(3)})).message,
             Catch::Contains("field named 'value'"));
}

TEST_CASE("shuffle is a permutation, reproducible by seed, reshuffled per epoch", "[pipeline]") {
  runtime rt{test_runtime_options()};
  for (std::size_t buffer : {1u, 7u, 64u, 1000u}) {
    auto once = values(drain(rt, dataset::range(200).shuffle(buffer, 5)));
    auto again = values(drain(rt, dataset::range(200).shuffle(buffer, 5)));
    CHECK(once == again);
    auto sorted = once;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(0, 200));
    if (buffer == 1) CHECK(once == iota(0, 200));
  }
  auto epochs = values(drain(rt, dataset::range(50).shuffle(50, 9).repeat(2)));
  REQUIRE(epochs.size() == 100);
  std::vector<int64_t> first(epochs.begin(), epochs.begin() + 50), second(epochs.begin() + 50, epochs.end());
  CHECK(first != second);
  auto fixed = values(drain(rt, dataset::range(50).shuffle(50, 9, false).repeat(2)));
  CHECK(std::vector<int64_t>(fixed.begin(), fixed.begin() + 50) == std::vector<int64_t>(fixed.begin() + 50, fixed.end()));
}

TEST_CASE("shuffle with a full buffer is uniform (chi-square over first positions)", "[pipeline]") {
  runtime rt{test_runtime_options()};
  // Element k's position after a full-buffer shuffle of 10 is uniform: count where element 0 lands.
  constexpr int n = 10, trials = 300;  // 30 expected per cell; each epoch is a topology launch
  std::vector<int> lands(n, 0);
  auto ds = dataset::range(n).shuffle(n, 123).repeat(trials);
  auto all = values(drain(rt, ds));
  REQUIRE(all.size() == static_cast<std::size_t>(n * trials));
  for (int t = 0; t < trials; ++t)
    for (int p = 0; p < n; ++p)
      if (all[static_cast<std::size_t>(t * n + p)] == 0) ++lands[static_cast<std::size_t>(p)];
  double chi2 = 0;
  const double expect = static_cast<double>(trials) / n;
  for (int c : lands) chi2 += (c - expect) * (c - expect) / expect;
  // 9 degrees of freedom: P(chi2 > 27.88) = 0.001.
  CHECK(chi2 < 27.88);
}

TEST_CASE("repeat, prefetch and cache replay the input", "[pipeline]") {
  runtime rt{test_runtime_options()};
  CHECK(values(drain(rt, dataset::range(4).repeat(3))) == std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  CHECK(values(drain(rt, dataset::range(4).repeat(0))).empty());
  CHECK(values(drain(rt, dataset::range(0).repeat())).empty());
  CHECK(values(drain(rt, dataset::range(100).prefetch(16))) == iota(0, 100));
  // The generator runs once: later epochs come from the cache.
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto counted = dataset::range(5).map([calls](element e) -> expected<element> {
    calls->fetch_add(1);
    return e;
  });
  CHECK(values(drain(rt, counted.cache().repeat(3))) ==
        std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4});
  CHECK(calls->load() == 5);
  // A pass cut short is not trusted: the next pass reads the input again.
  calls->store(0);
  CHECK(values(drain(rt, counted.cache().take(2).repeat(2))) == std::vector<int64_t>{0, 1, 0, 1});
  CHECK(calls->load() >= 4);
}

TEST_CASE("interleave cycles through children in blocks like tf.data", "[pipeline]") {
  runtime rt{test_runtime_options()};
  // Child i yields i*10 .. i*10 + i (i + 1 elements), cycle 2, block 2.
  auto children = dataset::range(1, 4).interleave(
      [](const element& e) -> expected<dataset> {
        const int64_t i = e.find("value")->item<int64_t>();
        return dataset::range(i * 10, i * 10 + i + 1);
      },
      2, 2);
  // Reference: the sequential interleave algorithm on the same inputs.
  std::vector<std::vector<int64_t>> inputs{{10, 11}, {20, 21, 22}, {30, 31, 32, 33}};
  std::vector<int64_t> expect;
  {
    std::vector<std::pair<std::size_t, std::size_t>> slots;  // (child, position); child SIZE_MAX = empty
    std::size_t next_input = 0, index = 0;
    slots.assign(2, {SIZE_MAX, 0});
    for (;;) {
      auto& s = slots[index];
      if (s.first != SIZE_MAX) {
        bool advanced = false;
        for (int b = 0; b < 2; ++b) {
          if (s.second >= inputs[s.first].size()) {
            s.first = SIZE_MAX;
            break;
          }
          expect.push_back(inputs[s.first][s.second++]);
          advanced = b == 1;
        }
        if (advanced && s.second >= inputs[s.first].size()) {
          // exhausted exactly at the block end: the next visit finds it empty
        }
        index = (index + 1) % 2;
      } else if (next_input < inputs.size()) {
        s = {next_input++, 0};
      } else {
        if (slots[0].first == SIZE_MAX && slots[1].first == SIZE_MAX) break;
        index = (index + 1) % 2;
      }
    }
  }
  CHECK(values(drain(rt, children)) == expect);
  for (int64_t parallelism : {int64_t{1}, int64_t{2}, int64_t{5}, autotune}) {
    auto same = values(drain(rt, dataset::range(1, 4).interleave(
        [](const element& e) -> expected<dataset> {
          const int64_t i = e.find("value")->item<int64_t>();
          return dataset::range(i * 10, i * 10 + i + 1);
        },
        2, 2, parallelism)));
    CHECK(same == expect);
  }
}

TEST_CASE("map errors and exceptions name the element's origin, and ignore_errors skips and counts them", "[pipeline]") {
  runtime rt{test_runtime_options()};
  auto failing = dataset::range(10).map([](element e) -> expected<element> {
    const int64_t v = e.find("value")->item<int64_t>();
    if (v == 4) return make_error(errc::invalid_argument, "four is bad");
    if (v == 7) throw std::runtime_error("seven threw");
    return e;
  });
  std::vector<element> before;
  auto err = drain_error(rt, failing, &before);
  CHECK(values(before) == iota(0, 4));
  CHECK_THAT(err.message, Catch::Contains("four is bad") && Catch::Contains("map"));
  auto lenient = failing.ignore_errors();
  auto it = lenient.iterate(rt);
  std::vector<element> kept;
  for (auto& e : it) kept.push_back(e);
  CHECK(it.status().code == errc::none);
  CHECK(values(kept) == std::vector<int64_t>{0, 1, 2, 3, 5, 6, 8, 9});
  CHECK(it.stats().skipped_errors == 2);
  CHECK_THAT(it.stats().first_skipped_error, Catch::Contains("four is bad"));
}

TEST_CASE("to_dot names every transformation", "[pipeline]") {
  runtime rt{test_runtime_options()};
  auto ds = dataset::zip({dataset::range(3), dataset::range(3).map([](element e) -> expected<element> {
                            return element{{"w", *e.find("value")}};
                          }, 4)})
                .shuffle(10, 1)
                .batch(2)
                .prefetch(autotune);
  const auto dot = ds.to_dot();
  for (const char* label : {"zip", "range(0, 3, 1)", "map (parallelism 4)", "shuffle(10)", "batch(2)", "prefetch(autotune)"})
    CHECK_THAT(dot, Catch::Contains(label));
}

TEST_CASE("random chains of transformations equal a sequential reference", "[pipeline]") {
  runtime rt{test_runtime_options()};
  std::mt19937 rng{2024};
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>{lo, hi}(rng); };
  for (int round = 0; round < 25; ++round) {
    const int64_t n = pick(0, 400);
    auto ds = dataset::range(n);
    std::vector<int64_t> expect = iota(0, n);
    std::string chain = "range(" + std::to_string(n) + ")";
    for (int step = 0, steps = static_cast<int>(pick(1, 6)); step < steps; ++step) {
      switch (pick(0, 6)) {
        case 0: {
          const int64_t k = pick(1, 5), parallelism = pick(1, 6);
          ds = ds.map([k](element e) -> expected<element> {
            e.set("value", tensor::scalar<int64_t>(e.find("value")->item<int64_t>() * k + 1));
            return e;
          }, parallelism);
          for (auto& v : expect) v = v * k + 1;
          chain += ".map(*" + std::to_string(k) + "+1, " + std::to_string(parallelism) + ")";
          break;
        }
        case 1: {
          const int64_t m = pick(2, 4);
          ds = ds.filter([m](const element& e) -> expected<bool> { return e.find("value")->item<int64_t>() % m != 0; });
          std::erase_if(expect, [m](int64_t v) { return v % m == 0; });
          chain += ".filter(%" + std::to_string(m) + ")";
          break;
        }
        case 2: {
          const int64_t t = pick(0, 300);
          ds = ds.take(t);
          if (static_cast<int64_t>(expect.size()) > t) expect.resize(static_cast<std::size_t>(t));
          chain += ".take(" + std::to_string(t) + ")";
          break;
        }
        case 3: {
          const int64_t s = pick(0, 50);
          ds = ds.skip(s);
          expect.erase(expect.begin(), expect.begin() + std::min<int64_t>(s, static_cast<int64_t>(expect.size())));
          chain += ".skip(" + std::to_string(s) + ")";
          break;
        }
        case 4: {
          const int64_t shards = pick(1, 4), index = pick(0, shards - 1);
          ds = ds.shard(shards, index);
          std::vector<int64_t> kept;
          for (std::size_t i = 0; i < expect.size(); ++i)
            if (static_cast<int64_t>(i) % shards == index) kept.push_back(expect[i]);
          expect = kept;
          chain += ".shard(" + std::to_string(shards) + ", " + std::to_string(index) + ")";
          break;
        }
        case 5: {
          const auto size = static_cast<std::size_t>(pick(1, 9));
          ds = ds.batch(size).unbatch();
          chain += ".batch(" + std::to_string(size) + ").unbatch()";
          break;
        }
        default: {
          const int64_t depth = pick(1, 40);
          ds = ds.prefetch(depth);
          chain += ".prefetch(" + std::to_string(depth) + ")";
          break;
        }
      }
    }
    INFO(chain);
    CHECK(values(drain(rt, ds)) == expect);
  }
}

TEST_CASE("an actor-side sink attaches to a dataset's pipeline", "[pipeline]") {
  runtime rt{test_runtime_options()};
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<int64_t> got;
  bool done = false;
  error status;
  auto topo = launch(rt, dataset::range(100).shuffle(10, 3).batch(8).to_pipeline(rt), {.slots = 2, .name = "trainer"},
                     [&](element&& batch) -> expected<void> {
                       std::lock_guard<std::mutex> guard{mtx};
                       for (auto v : batch.find("value")->to_vector<int64_t>()) got.push_back(v);
                       return {};
                     },
                     [&](const error& err) {
                       std::lock_guard<std::mutex> guard{mtx};
                       status = err;
                       done = true;
                       cv.notify_all();
                     });
  std::unique_lock<std::mutex> lock{mtx};
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
  CHECK(status.code == errc::none);
  std::sort(got.begin(), got.end());
  CHECK(got == iota(0, 100));
}

TEST_CASE("batching slices of in-memory columns gives views equal to stacked rows, and resumes", "[pipeline]") {
  runtime rt{test_runtime_options()};
  std::vector<float> xs(10 * 3);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);
  element columns{{"x", tensor::from_vector(xs, {10, 3})}, {"value", tensor::from_vector<int64_t>(iota(0, 10))}};
  auto slices = dataset::from_tensor_slices(columns);
  for (bool drop : {false, true}) {
    const auto fused = slices.batch(4, drop);
    const auto stacked = slices.map([](element e) -> expected<element> { return e; }).batch(4, drop);
    CHECK(fused.to_dot().find("from_tensor_slices(x, value).batch(4") != std::string::npos);
    auto a = drain(rt, fused), b = drain(rt, stacked);
    REQUIRE(a.size() == (drop ? 2u : 3u));
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].find("x")->shape() == b[i].find("x")->shape());
      CHECK(a[i].find("x")->to_vector<float>() == b[i].find("x")->to_vector<float>());
      CHECK(a[i].find("value")->to_vector<int64_t>() == b[i].find("value")->to_vector<int64_t>());
    }
  }
  auto it = slices.batch(4).iterate(rt);
  REQUIRE(it.next());
  auto resumed = slices.batch(4).resume(rt, it.save());
  REQUIRE(resumed);
  auto next = resumed->next();
  REQUIRE(next);
  REQUIRE(next->has_value());
  CHECK((*next)->find("value")->to_vector<int64_t>() == std::vector<int64_t>{4, 5, 6, 7});
}
