#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "ops/small_vector.hpp"

using af::small_vector;
using dims = small_vector<int64_t, 4>;

namespace {

bool same(const dims& a, const std::vector<int64_t>& b) { return std::vector<int64_t>(a) == b; }

}  // namespace

TEST_CASE("small_vector keeps few values inline and spills to the heap beyond", "[cpu][small_vector]") {
  dims d{1, 2, 3};
  CHECK(d.size() == 3);
  CHECK(d.capacity() == 4);
  d.push_back(4);
  CHECK(d.capacity() == 4);
  d.push_back(5);  // spills
  CHECK(d.capacity() >= 5);
  CHECK(same(d, {1, 2, 3, 4, 5}));
  d.pop_back();
  d.erase(d.begin());
  CHECK(same(d, {2, 3, 4}));
}

TEST_CASE("small_vector copies and moves inline and heap storage alike", "[cpu][small_vector]") {
  for (std::size_t n : {0u, 3u, 4u, 9u}) {
    dims source;
    for (std::size_t i = 0; i < n; ++i) source.push_back(static_cast<int64_t>(i * 7));
    dims copy = source;
    CHECK(copy == source);
    dims moved = std::move(copy);
    CHECK(moved == source);
    CHECK(copy.empty());  // NOLINT: a moved-from small_vector is empty and usable
    copy.push_back(1);
    CHECK(same(copy, {1}));
    dims assigned{42};
    assigned = moved;
    CHECK(assigned == source);
    assigned = std::move(moved);
    CHECK(assigned == source);
  }
}

TEST_CASE("small_vector edits match std::vector on random operations", "[cpu][small_vector]") {
  std::mt19937 rng{5};
  dims mine;
  std::vector<int64_t> reference;
  for (int step = 0; step < 5000; ++step) {
    const int op = static_cast<int>(rng() % 7);
    const auto value = static_cast<int64_t>(rng() % 100);
    const std::size_t at = reference.empty() ? 0 : rng() % (reference.size() + 1);
    switch (op) {
      case 0: mine.push_back(value); reference.push_back(value); break;
      case 1: mine.insert(mine.begin() + at, value); reference.insert(reference.begin() + at, value); break;
      case 2:
        if (at < reference.size()) {
          mine.erase(mine.begin() + at);
          reference.erase(reference.begin() + at);
        }
        break;
      case 3: mine.resize(at, value); reference.resize(at, value); break;
      case 4:  // insert a range taken from the vector itself
        if (!reference.empty()) {
          mine.insert(mine.begin() + at, mine.begin(), mine.begin() + 1);
          reference.insert(reference.begin() + at, reference.begin(), reference.begin() + 1);
        }
        break;
      case 5: mine.insert(mine.begin() + at, 2, value); reference.insert(reference.begin() + at, 2, value); break;
      default:
        if (reference.size() > 12) {
          mine.clear();
          reference.clear();
        }
    }
    REQUIRE(same(mine, reference));
  }
}

TEST_CASE("small_vector converts to and from std::vector", "[cpu][small_vector]") {
  const std::vector<int64_t> big{1, 2, 3, 4, 5, 6, 7};
  dims from = big;
  CHECK(from == big);
  CHECK(big == from);
  std::vector<int64_t> back = from;
  CHECK(back == big);
  CHECK(dims{1, 2} < dims{1, 3});
  CHECK(dims(3, 9) == std::vector<int64_t>{9, 9, 9});
}
