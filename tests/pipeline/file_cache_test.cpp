// cache(path): the first complete pass streams into a file renamed into place at the end; later
// builds read the file; passes cut short leave nothing; bad files are errors naming path and record.

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ops/allocator.hpp"
#include "../support/scratch_dir.hpp"
#include "pipeline_test_util.hpp"
#include "serialization/tfrecord.hpp"

using namespace af;
using namespace af::data;
using namespace af::data::testing;
using af::testing::flip_byte;
using af::testing::scratch_dir;

namespace {


// range(n) whose every element increments `calls` (the input "runs" once per call).
dataset counted_range(int64_t n, std::shared_ptr<std::atomic<int>> calls) {
  return dataset::range(n).map([calls](element e) -> expected<element> {
    calls->fetch_add(1);
    return e;
  });
}

// Element i: an f32 matrix [i+1, 3], an i64 scalar and u8 bytes of length i.
element mixed_element(int64_t i) {
  std::vector<float> m;
  for (int64_t k = 0; k < (i + 1) * 3; ++k) m.push_back(static_cast<float>(i) + 0.25f * static_cast<float>(k));
  std::vector<uint8_t> bytes;
  for (int64_t k = 0; k < i; ++k) bytes.push_back(static_cast<uint8_t>(k * 7 + i));
  return {{"matrix", tensor::from_vector(m, {i + 1, 3})},
          {"id", tensor::scalar<int64_t>(i * 1000003)},
          {"bytes", tensor::from_vector(bytes, {i})}};
}

dataset mixed_input(int64_t n, std::shared_ptr<std::atomic<int>> calls) {
  return dataset::from_generator("mixed", [n, calls] {
    return generator_fn{[n, calls, i = int64_t{0}]() mutable -> expected<std::optional<element>> {
      if (i >= n) return std::optional<element>{};
      calls->fetch_add(1);
      return std::optional<element>{mixed_element(i++)};
    }};
  });
}

void check_mixed(const std::vector<element>& got, int64_t n) {
  REQUIRE(static_cast<int64_t>(got.size()) == n);
  for (int64_t i = 0; i < n; ++i) {
    const element want = mixed_element(i);
    REQUIRE(got[i].size() == want.size());
    for (std::size_t f = 0; f < want.size(); ++f) {
      CHECK(got[i].fields[f].name == want.fields[f].name);
      CHECK(all_equal(got[i].fields[f].value, want.fields[f].value));
    }
  }
}

void resize_file(const std::string& path, uintmax_t size) { std::filesystem::resize_file(path, size); }

}  // namespace

TEST_CASE("cache(path) returns the input's elements of mixed dtypes and shapes, then the same from the file",
          "[pipeline][cache]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  const auto path = dir.file("mixed.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = mixed_input(12, calls).cache(path);
  CHECK(ds.to_dot().find("cache('" + path + "')") != std::string::npos);

  check_mixed(drain(rt, ds), 12);
  CHECK(calls->load() == 12);
  CHECK(std::filesystem::exists(path));
  CHECK(dir.others("mixed.cache").empty());  // the partial file was renamed, none left behind

  check_mixed(drain(rt, ds), 12);
  CHECK(calls->load() == 12);
}

TEST_CASE("repeat(3) over cache(path) runs the input once and serves later epochs from the file",
          "[pipeline][cache]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto got = values(drain(rt, counted_range(20, calls).cache(dir.file("r.cache")).repeat(3)));
  std::vector<int64_t> want;
  for (int epoch = 0; epoch < 3; ++epoch)
    for (auto v : iota(0, 20)) want.push_back(v);
  CHECK(got == want);
  CHECK(calls->load() == 20);
}

TEST_CASE("a new iteration and a new description of the same path read the file without the input",
          "[pipeline][cache]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  const auto path = dir.file("again.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = counted_range(30, calls).cache(path);
  CHECK(values(drain(rt, ds)) == iota(0, 30));
  CHECK(calls->load() == 30);
  CHECK(values(drain(rt, ds)) == iota(0, 30));
  CHECK(calls->load() == 30);

  // As another process would: a fresh description whose input must not run.
  auto never = dataset::range(5).map([](element) -> expected<element> {
    return make_error(errc::invalid_argument, "the input ran although the cache file exists");
  });
  CHECK(values(drain(rt, never.cache(path))) == iota(0, 30));
}

TEST_CASE("take(2) before the pass completes leaves no cache file and no partial file", "[pipeline][cache]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  const auto path = dir.file("short.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = counted_range(100000, calls).cache(path);
  CHECK(values(drain(rt, ds.take(2))) == iota(0, 2));
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(dir.others("").empty());

  // The next full pass writes the file.
  CHECK(values(drain(rt, counted_range(50, calls).cache(path))) == iota(0, 50));
  CHECK(std::filesystem::exists(path));
  CHECK(dir.others("short.cache").empty());
}

TEST_CASE("an input error leaves no cache file and no partial file", "[pipeline][cache]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  const auto path = dir.file("failed.cache");
  auto failing = dataset::range(100).map([](element e) -> expected<element> {
    if (e.find("value")->item<int64_t>() == 40) return make_error(errc::invalid_argument, "element 40 is bad");
    return e;
  });
  std::vector<element> before;
  auto err = drain_error(rt, failing.cache(path), &before);
  CHECK(err.code == errc::invalid_argument);
  CHECK_THAT(err.message, Catch::Matchers::Contains("element 40 is bad"));
  CHECK(before.size() <= 40);
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(dir.others("").empty());
}

TEST_CASE("two iterations writing the same cache path at once leave one complete file", "[pipeline][cache]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  const auto path = dir.file("race.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = counted_range(500, calls).cache(path);
  auto first = ds.iterate(rt);   // both are built before either has written the file
  auto second = ds.iterate(rt);
  std::vector<int64_t> a, b;
  for (bool more = true; more;) {
    more = false;
    for (auto* it : {&first, &second}) {
      auto next = it->next();
      REQUIRE(next.has_value());
      if (!next->has_value()) continue;
      more = true;
      (it == &first ? a : b).push_back((*next)->find("value")->item<int64_t>());
    }
  }
  CHECK(a == iota(0, 500));
  CHECK(b == iota(0, 500));
  CHECK(calls->load() == 1000);
  CHECK(dir.others("race.cache").empty());
  CHECK(values(drain(rt, ds)) == iota(0, 500));
  CHECK(calls->load() == 1000);
}

TEST_CASE("a cache file cut short or bit-flipped or of another format is an error naming the path and record",
          "[pipeline][cache]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  const auto good = dir.file("good.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  drain(rt, mixed_input(10, calls).cache(good));
  const auto size = std::filesystem::file_size(good);
  auto never = mixed_input(10, calls);  // must not run: each case has a file at its path
  const int ran = calls->load();

  SECTION("cut inside a record") {
    const auto path = dir.file("cut.cache");
    std::filesystem::copy_file(good, path);
    resize_file(path, size - 40);
    auto err = drain_error(rt, never.cache(path));
    CHECK(err.code == errc::malformed_input);
    CHECK_THAT(err.message, Catch::Matchers::Contains(path) && Catch::Matchers::Contains("truncated") &&
                                Catch::Matchers::Contains("record") && Catch::Matchers::Contains("offset"));
  }
  SECTION("cut at a record boundary (the end record missing)") {
    const auto path = dir.file("boundary.cache");
    std::filesystem::copy_file(good, path);
    resize_file(path, size - (tfrecord_header_bytes + 9 + tfrecord_footer_bytes));
    std::vector<element> before;
    auto err = drain_error(rt, never.cache(path), &before);
    CHECK(err.code == errc::malformed_input);
    CHECK_THAT(err.message, Catch::Matchers::Contains(path) && Catch::Matchers::Contains("truncated") &&
                                Catch::Matchers::Contains("record 11, offset"));
  }
  SECTION("one bit flipped in an element's payload") {
    const auto path = dir.file("flipped.cache");
    std::filesystem::copy_file(good, path);
    flip_byte(path, size / 2);
    auto err = drain_error(rt, never.cache(path));
    CHECK(err.code == errc::malformed_input);
    CHECK_THAT(err.message, Catch::Matchers::Contains(path) && Catch::Matchers::Contains("record") &&
                                Catch::Matchers::Contains("offset") && Catch::Matchers::Contains("CRC"));
  }
  SECTION("a TFRecord file of another format") {
    const auto path = dir.file("foreign.cache");
    auto w = tfrecord_writer::open(path);
    REQUIRE(w.has_value());
    REQUIRE(w->write("not a cache header").has_value());
    REQUIRE(w->close().has_value());
    auto err = drain_error(rt, never.cache(path));
    CHECK(err.code == errc::malformed_input);
    CHECK_THAT(err.message, Catch::Matchers::Contains(path) && Catch::Matchers::Contains("record 0") &&
                                Catch::Matchers::Contains("bad magic"));
  }
  SECTION("a newer format version") {
    const auto path = dir.file("version.cache");
    // The header record as a later format would write it: magic, version, empty description.
    std::string header{"actorflow-cache"};
    const uint32_t version = 99;
    header.append(reinterpret_cast<const char*>(&version), 4);
    header.append(std::string(4, '\0'));
    auto w = tfrecord_writer::open(path);
    REQUIRE(w.has_value());
    REQUIRE(w->write(header).has_value());
    REQUIRE(w->close().has_value());
    auto err = drain_error(rt, never.cache(path));
    CHECK_THAT(err.message, Catch::Matchers::Contains(path) && Catch::Matchers::Contains("version 99"));
  }
  CHECK(calls->load() == ran);
}

TEST_CASE("caching 2000 elements of 64 KiB streams them so memory stays far below the data size",
          "[pipeline][cache]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  const auto path = dir.file("big.cache");
  constexpr int64_t count = 2000;
  constexpr int64_t bytes = 64 * 1024;
  auto big = dataset::from_generator("big", [] {
    return generator_fn{[i = int64_t{0}]() mutable -> expected<std::optional<element>> {
      if (i >= count) return std::optional<element>{};
      auto t = tensor::empty({bytes}, dtype::u8);
      if (!t) return t.error_value();
      std::memset(t->raw_data(), static_cast<int>(i % 251), bytes);
      element e{{"blob", std::move(*t)}, {"index", tensor::scalar<int64_t>(i)}};
      ++i;
      return std::optional<element>{std::move(e)};
    }};
  });
  auto ds = big.cache(path);
  const std::size_t limit = static_cast<std::size_t>(count * bytes / 4);

  for (int pass = 0; pass < 2; ++pass) {  // writing the file, then reading it
    INFO("pass " << pass);
    cpu_allocator()->reset_peak();
    auto it = ds.iterate(rt);
    int64_t seen = 0;
    for (;;) {
      auto next = it.next();
      REQUIRE(next.has_value());
      if (!next->has_value()) break;
      const element& e = **next;
      REQUIRE(e.find("index")->item<int64_t>() == seen);
      const auto* blob = static_cast<const uint8_t*>(e.find("blob")->raw_data());
      REQUIRE(blob[0] == static_cast<uint8_t>(seen % 251));
      REQUIRE(blob[bytes - 1] == static_cast<uint8_t>(seen % 251));
      ++seen;
    }
    CHECK(seen == count);
    CHECK(cpu_allocator()->stats().peak_bytes_in_use < limit);
    CHECK(std::filesystem::exists(path));
  }
  CHECK(std::filesystem::file_size(path) > static_cast<uintmax_t>(count * bytes));
}

TEST_CASE("string fields batch as strings, and the cache refuses them by name", "[pipeline][cache][string]") {
  runtime rt{test_runtime_options()};
  scratch_dir dir{"af_file_cache"};
  auto keyed = dataset::range(4).map([](element e) -> expected<element> {
    e.set("key", tensor::from_vector(std::vector<std::string>{"key-" + std::to_string(e.find("value")->item<int64_t>()) +
                                                               std::string(30, '.')}));
    return e;
  });
  const auto batches = drain(rt, keyed.batch(2));
  REQUIRE(batches.size() == 2);
  CHECK(batches[1].find("key")->to_vector<std::string>() ==
        std::vector<std::string>{"key-2" + std::string(30, '.'), "key-3" + std::string(30, '.')});
  const error refused = drain_error(rt, keyed.cache(dir.file("k.cache")));
  CHECK(refused.code == errc::unsupported);
  CHECK(refused.message.find("'key'") != std::string::npos);
  CHECK(refused.message.find("strings") != std::string::npos);
}
