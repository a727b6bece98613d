// The ring all-reduce (actors/collectives.hpp): sums equal to a reference on every ring size and on
// sizes that do not divide evenly, the same bits on every rank, and calls that do not line up or a
// rank that never comes failing every rank by name instead of hanging.

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "actors/collectives.hpp"
#include "actors/runtime.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"

using namespace af;
using namespace af::collectives;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {

// Each rank's call on a thread of its own, as replicas make them; the results in rank order.
std::vector<expected<tensor>> call_every_rank(const ring_group& ring, const std::vector<call_id>& ids,
                                              const std::vector<tensor>& values) {
  std::vector<expected<tensor>> out(values.size(), make_error(errc::cancelled, "not called"));
  std::vector<std::thread> replicas;
  for (std::size_t r = 0; r < values.size(); ++r)
    replicas.emplace_back([&, r] { out[r] = ring.all_reduce(static_cast<int>(r), ids[r], values[r]); });
  for (auto& t : replicas) t.join();
  return out;
}

tensor random_values(int64_t n, uint64_t seed) {
  return random_normal({n}, seed).value();
}

}  // namespace

TEST_CASE("a ring of 1 to 4 ranks sums every rank's tensor, the same bits on every rank", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  // The small sizes go by recursive doubling on 2 and 4 ranks unless it is turned off (0).
  for (std::size_t doubling : {std::size_t{64} << 10, std::size_t{0}})
  for (int ranks : {1, 2, 3, 4}) {
    auto ring = ring_group::start(rt, {.ranks = ranks, .doubling_max_bytes = doubling});
    REQUIRE(ring);
    uint64_t step = 0;
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{100003}}) {  // none, fewer than ranks, ragged chunks
      INFO(ranks << " ranks, " << n << " elements, step " << step << ", doubling up to " << doubling << " bytes");
      std::vector<tensor> values;
      std::vector<double> want(static_cast<std::size_t>(n), 0.0);
      for (int r = 0; r < ranks; ++r) {
        values.push_back(random_values(n, 100 * step + static_cast<uint64_t>(r)));
        for (int64_t i = 0; i < n; ++i) want[static_cast<std::size_t>(i)] += values.back().data<float>()[i];
      }
      const std::vector<call_id> ids(static_cast<std::size_t>(ranks), call_id{step, 0});
      auto results = call_every_rank(*ring, ids, values);
      for (int r = 0; r < ranks; ++r) {
        REQUIRE(results[static_cast<std::size_t>(r)]);
        const tensor& got = *results[static_cast<std::size_t>(r)];
        REQUIRE(got.numel() == n);
        double worst = 0;
        for (int64_t i = 0; i < n; ++i)
          worst = std::max(worst, std::fabs(got.data<float>()[i] - want[static_cast<std::size_t>(i)]) /
                                      (1.0 + std::fabs(want[static_cast<std::size_t>(i)])));
        CHECK(worst <= 1e-6);
        CHECK(std::memcmp(got.raw_data(), results[0]->raw_data(), got.nbytes()) == 0);  // mirrored replicas stay equal
      }
      for (int r = 0; r < ranks && n > 0; ++r)  // the callers' tensors are left as they were
        CHECK(values[static_cast<std::size_t>(r)].data<float>()[0] == random_values(n, 100 * step + static_cast<uint64_t>(r)).data<float>()[0]);
      ++step;
    }
  }
}

TEST_CASE("integer all-reduce is exact and keeps the caller's shape out of the wire", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  auto ring = ring_group::start(rt, {.ranks = 3}).value();
  std::vector<tensor> values;
  for (int64_t r = 0; r < 3; ++r) values.push_back(tensor::from_vector<int64_t>({r, 10 * r, 100 * r, 1000 * r, -r, (int64_t{1} << 40) * r}, {2, 3}));
  auto results = call_every_rank(ring, std::vector<call_id>(3, call_id{7, 2}), values);
  for (auto& result : results) {
    REQUIRE(result);
    CHECK(result->to_vector<int64_t>() == std::vector<int64_t>{3, 30, 300, 3000, -3, (int64_t{1} << 40) * 3});
  }
}

TEST_CASE("a bfloat16 all-reduce adds in f32 and rounds each partial sum to bf16, the same bits on every rank", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  for (int ranks : {2, 3, 4}) {
    auto ring = ring_group::start(rt, {.ranks = ranks}).value();
    std::vector<tensor> values;
    // Small integers are exact in bf16; 1 + 2^-9 is not (8 significant bits) and rounds to 1.
    for (int r = 0; r < ranks; ++r) {
      auto f = tensor::from_vector<float>({static_cast<float>(r + 1), -2.0f * static_cast<float>(r), 1.0f + 1.0f / 512, 0.5f}, {4});
      values.push_back(cast(f, dtype::bf16).value());
    }
    auto results = call_every_rank(ring, std::vector<call_id>(static_cast<std::size_t>(ranks), call_id{1, 0}), values);
    const float n = static_cast<float>(ranks);
    for (auto& result : results) {
      REQUIRE(result);
      CHECK(result->type() == dtype::bf16);
      const auto got = cast(*result, dtype::f32).value().to_vector<float>();
      CHECK(got[0] == n * (n + 1) / 2);
      CHECK(got[1] == -n * (n - 1));
      CHECK(got[2] == n);  // each addend rounded to 1 before the ring saw it
      CHECK(got[3] == n / 2);
      CHECK(result->to_vector<float>() == results[0]->to_vector<float>());
    }
  }
}

TEST_CASE("calls that do not line up fail every rank, naming both ranks and both calls", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  SECTION("another bucket") {
    auto ring = ring_group::start(rt, {.ranks = 2}).value();
    auto results = call_every_rank(ring, {call_id{4, 0}, call_id{4, 1}}, {random_values(64, 1), random_values(64, 2)});
    for (auto& result : results) {
      REQUIRE_FALSE(result);
      CHECK(result.error_value().code == errc::invalid_argument);
      CHECK_THAT(result.error_value().message, Contains("(step 4, bucket 0)") && Contains("(step 4, bucket 1)") &&
                                                   Contains("every rank must make the same calls"));
    }
    // The ring stays failed: a later call is refused at once rather than summed out of step.
    auto later = ring.all_reduce(0, {5, 0}, random_values(64, 3));
    REQUIRE_FALSE(later);
    CHECK_THAT(later.error_value().message, Contains("(step 4, bucket 1)"));
  }
  SECTION("another shape") {
    auto ring = ring_group::start(rt, {.ranks = 3}).value();
    auto results = call_every_rank(ring, std::vector<call_id>(3, call_id{0, 0}),
                                   {random_values(64, 1), random_values(65, 2), random_values(64, 3)});
    for (auto& result : results) {
      REQUIRE_FALSE(result);
      CHECK_THAT(result.error_value().message, Contains("f32[64]") && Contains("f32[65]"));
    }
  }
}

TEST_CASE("a rank that never calls fails the others after the timeout, naming it", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  auto ring = ring_group::start(rt, {.ranks = 3, .timeout = 200ms}).value();
  std::vector<expected<tensor>> out(2, make_error(errc::cancelled, "not called"));
  const auto start = std::chrono::steady_clock::now();
  std::thread r0{[&] { out[0] = ring.all_reduce(0, {9, 0}, random_values(100, 1)); }};
  std::thread r1{[&] { out[1] = ring.all_reduce(1, {9, 0}, random_values(100, 2)); }};
  r0.join();
  r1.join();
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  for (auto& result : out) {
    REQUIRE_FALSE(result);
    CHECK(result.error_value().code == errc::timeout);
    CHECK_THAT(result.error_value().message, Contains("rank(s) 2 did not arrive within 200 ms") && Contains("(step 9, bucket 0)"));
  }
}

TEST_CASE("all_reduce refuses a rank outside the ring and values it cannot sum", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  CHECK_FALSE(ring_group::start(rt, {.ranks = 0}));
  CHECK_FALSE(ring_group::start(rt, {.ranks = 2, .timeout = 0ms}));
  auto ring = ring_group::start(rt, {.ranks = 2}).value();
  auto outside = ring.all_reduce(2, {}, random_values(4, 1));
  REQUIRE_FALSE(outside);
  CHECK_THAT(outside.error_value().message, Contains("rank 2 is outside the ring of 2"));
  auto bytes = ring.all_reduce(0, {}, tensor::from_vector<uint8_t>({1, 0}));
  REQUIRE_FALSE(bytes);
  CHECK_THAT(bytes.error_value().message, Contains("is not summed"));
}

TEST_CASE("all_gather stacks every rank's tensor in rank order on every rank", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  for (int ranks : {1, 2, 3, 4}) {
    INFO(ranks << " ranks");
    auto ring = ring_group::start(rt, {.ranks = ranks}).value();
    std::vector<tensor> values;
    std::vector<int32_t> want;
    for (int r = 0; r < ranks; ++r) {
      std::vector<int32_t> v{r, 10 + r, 20 + r, 30 + r, 40 + r, 50 + r};
      want.insert(want.end(), v.begin(), v.end());
      values.push_back(tensor::from_vector<int32_t>(v, {2, 3}));
    }
    std::vector<expected<tensor>> results(static_cast<std::size_t>(ranks), make_error(errc::cancelled, "not called"));
    std::vector<std::thread> replicas;
    for (int r = 0; r < ranks; ++r)
      replicas.emplace_back([&, r] { results[static_cast<std::size_t>(r)] = ring.all_gather(r, {1, 0}, values[static_cast<std::size_t>(r)]); });
    for (auto& t : replicas) t.join();
    for (auto& result : results) {
      REQUIRE(result);
      CHECK(result->shape() == shape{ranks, 2, 3});
      CHECK(result->to_vector<int32_t>() == want);
    }
  }
}

TEST_CASE("broadcast passes the root's tensor to every rank, whichever rank is the root", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  auto ring = ring_group::start(rt, {.ranks = 4}).value();
  for (int root = 0; root < 4; ++root) {
    INFO("root " << root);
    std::vector<tensor> values;
    for (int r = 0; r < 4; ++r) values.push_back(random_values(1001, static_cast<uint64_t>(r == root ? 77 : 1000 + r)));
    std::vector<expected<tensor>> out(4, make_error(errc::cancelled, "not called"));
    std::vector<std::thread> replicas;
    for (int r = 0; r < 4; ++r)
      replicas.emplace_back([&, r] { out[static_cast<std::size_t>(r)] = ring.broadcast(r, root, {static_cast<uint64_t>(root), 0}, values[static_cast<std::size_t>(r)]); });
    for (auto& t : replicas) t.join();
    const auto want = random_values(1001, 77).to_vector<float>();
    for (auto& result : out) {
      REQUIRE(result);
      CHECK(result->to_vector<float>() == want);
    }
  }
  auto bad_root = ring.broadcast(0, 4, {}, random_values(3, 1));
  REQUIRE_FALSE(bad_root);
  CHECK_THAT(bad_root.error_value().message, Contains("root 4 is outside the ring of 4"));
}

TEST_CASE("ranks calling different collectives fail every rank, naming both", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  auto ring = ring_group::start(rt, {.ranks = 2}).value();
  std::vector<expected<tensor>> out(2, make_error(errc::cancelled, "not called"));
  std::thread r0{[&] { out[0] = ring.all_reduce(0, {3, 0}, random_values(8, 1)); }};
  std::thread r1{[&] { out[1] = ring.all_gather(1, {3, 0}, random_values(8, 2)); }};
  r0.join();
  r1.join();
  for (auto& result : out) {
    REQUIRE_FALSE(result);
    CHECK_THAT(result.error_value().message, Contains("all_reduce (step 3, bucket 0) of f32[8]") &&
                                                 Contains("all_gather (step 3, bucket 0) of f32[8]"));
  }
}

TEST_CASE("a tensor handed over with std::move is summed in place, without a copy", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  auto ring = ring_group::start(rt, {.ranks = 2}).value();
  std::vector<expected<tensor>> out(2, make_error(errc::cancelled, "not called"));
  std::vector<const void*> storage(2);
  std::vector<std::thread> replicas;
  for (int r = 0; r < 2; ++r)
    replicas.emplace_back([&, r] {
      tensor gradient = tensor::from_vector<float>({1.0f + static_cast<float>(r), 2.0f, 3.0f});
      storage[static_cast<std::size_t>(r)] = gradient.raw_data();
      out[static_cast<std::size_t>(r)] = ring.all_reduce(r, {0, 0}, std::move(gradient));
    });
  for (auto& t : replicas) t.join();
  for (int r = 0; r < 2; ++r) {
    REQUIRE(out[static_cast<std::size_t>(r)]);
    CHECK(out[static_cast<std::size_t>(r)]->raw_data() == storage[static_cast<std::size_t>(r)]);
    CHECK(out[static_cast<std::size_t>(r)]->to_vector<float>() == std::vector<float>{3, 4, 6});
  }
}

TEST_CASE("ranks whose sizes make one choose recursive doubling and the other the ring fail naming both", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  auto ring = ring_group::start(rt, {.ranks = 2, .timeout = 5s}).value();
  auto results = call_every_rank(ring, {call_id{4, 1}, call_id{4, 1}}, {random_values(16, 1), random_values(100000, 2)});
  for (int r = 0; r < 2; ++r) {
    REQUIRE_FALSE(results[static_cast<std::size_t>(r)]);
    const auto& message = results[static_cast<std::size_t>(r)].error_value().message;
    CHECK_THAT(message, Contains("all_reduce (step 4, bucket 1) of f32[16] by recursive doubling"));
    CHECK_THAT(message, Contains("all_reduce (step 4, bucket 1) of f32[100000],") || Contains("all_reduce (step 4, bucket 1) of f32[100000]:"));
  }
  // The ring stays failed rather than answer later calls with sums of misaligned buffers.
  auto later = call_every_rank(ring, {call_id{5, 0}, call_id{5, 0}}, {random_values(16, 3), random_values(16, 4)});
  CHECK_FALSE(later[0]);
}

TEST_CASE("a rank may start several all-reduces before waiting for any, and they run in its order", "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  for (int ranks : {2, 3, 4}) {
    auto ring = ring_group::start(rt, {.ranks = ranks}).value();
    // ring, doubling, ring, doubling (on 2 and 4 ranks), then the buckets of a small CNN's gradients
    const std::vector<int64_t> sizes{5000, 7, 300001, 1, 10, 1280, 128, 32768, 64, 18432, 321};
    std::vector<std::vector<tensor>> values(static_cast<std::size_t>(ranks));
    std::vector<std::vector<double>> want(sizes.size());
    for (std::size_t b = 0; b < sizes.size(); ++b) {
      want[b].assign(static_cast<std::size_t>(sizes[b]), 0.0);
      for (int r = 0; r < ranks; ++r) {
        values[static_cast<std::size_t>(r)].push_back(random_values(sizes[b], 10 * b + static_cast<uint64_t>(r)));
        for (int64_t i = 0; i < sizes[b]; ++i) want[b][static_cast<std::size_t>(i)] += values[static_cast<std::size_t>(r)][b].data<float>()[i];
      }
    }
    std::vector<std::vector<expected<tensor>>> got(static_cast<std::size_t>(ranks));
    std::vector<std::thread> replicas;
    for (int r = 0; r < ranks; ++r)
      replicas.emplace_back([&, r] {
        std::vector<pending_result> pending;
        for (std::size_t b = 0; b < sizes.size(); ++b) {
          if (r == 1) std::this_thread::sleep_for(1ms);  // one rank starts its calls late
          pending.push_back(ring.start_all_reduce(r, {3, static_cast<uint32_t>(b)}, values[static_cast<std::size_t>(r)][b]));
        }
        for (auto& p : pending) got[static_cast<std::size_t>(r)].push_back(p.get());
        got[static_cast<std::size_t>(r)].push_back(pending[0].get());  // taken already
      });
    for (auto& t : replicas) t.join();
    for (int r = 0; r < ranks; ++r) {
      INFO(ranks << " ranks, rank " << r);
      for (std::size_t b = 0; b < sizes.size(); ++b) {
        REQUIRE(got[static_cast<std::size_t>(r)][b]);
        const tensor& sum = *got[static_cast<std::size_t>(r)][b];
        double worst = 0;
        for (int64_t i = 0; i < sizes[b]; ++i)
          worst = std::max(worst, std::fabs(sum.data<float>()[i] - want[b][static_cast<std::size_t>(i)]) / (1.0 + std::fabs(want[b][static_cast<std::size_t>(i)])));
        CHECK(worst <= 1e-6);
      }
      CHECK_FALSE(got[static_cast<std::size_t>(r)].back());
    }
  }
}

TEST_CASE("a rank moves on while its thread calls progress between kernels, and a dropped call is driven to its end",
          "[actors][collectives]") {
  runtime rt{{.scheduler_threads = 2}};
  auto ring = ring_group::start(rt, {.ranks = 2, .timeout = 20s}).value();
  // 1 MB goes round the ring: rank 1 finishes only once rank 0 has passed its chunk on, which its
  // thread does only while it drives the rank.
  const auto a = random_values(1 << 18, 1), b = random_values(1 << 18, 2);
  const auto want = add(a, b).value();
  std::atomic<bool> other_done{false};
  expected<tensor> got1 = make_error(errc::cancelled, "not called");
  std::thread r1{[&] {
    got1 = ring.all_reduce(1, {1, 0}, b);
    other_done = true;
  }};
  auto pending = ring.start_all_reduce(0, {1, 0}, a);
  const auto start = std::chrono::steady_clock::now();
  while (!other_done && std::chrono::steady_clock::now() - start < 15s) {
    ring.progress(0);  // a replica's kernels would run here
    std::this_thread::sleep_for(1ms);
  }
  r1.join();
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // not the timeout
  REQUIRE(got1);
  CHECK(got1->to_vector<float>() == want.to_vector<float>());
  auto got0 = pending.get();
  REQUIRE(got0);
  CHECK(got0->to_vector<float>() == want.to_vector<float>());

  // Rank 0 starts the next call and drops it unwaited: dropping drives its part, so rank 1 ends.
  std::thread r1_again{[&] { got1 = ring.all_reduce(1, {2, 0}, b); }};
  { auto dropped = ring.start_all_reduce(0, {2, 0}, a); }
  r1_again.join();
  REQUIRE(got1);
  CHECK(got1->to_vector<float>() == want.to_vector<float>());
}
