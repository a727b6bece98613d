#include <catch2/catch.hpp>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "ops/allocator.hpp"
#include "ops/tensor.hpp"

TEST_CASE("a freed block is reused for the next allocation of a similar size", "[cpu][allocator]") {
  auto alloc = *af::make_cpu_allocator();
  void* first = nullptr;
  {
    auto t = af::tensor::empty({1024, 256}, af::dtype::f32, alloc);
    REQUIRE(t);
    first = t->raw_data();
    CHECK(alloc->stats().bytes_in_use >= 1024 * 256 * 4);
  }
  CHECK(alloc->stats().bytes_in_use == 0);
  CHECK(alloc->stats().bytes_cached >= 1024 * 256 * 4);
  auto again = af::tensor::empty({1024, 255}, af::dtype::f32, alloc);
  REQUIRE(again);
  CHECK(again->raw_data() == first);
  auto stats = alloc->stats();
  CHECK(stats.cache_hits == 1);
  CHECK(stats.cache_misses == 1);
  CHECK(stats.allocations == 2);
  CHECK(stats.deallocations == 1);
}

TEST_CASE("the peak tracks the high-water mark until it is reset", "[cpu][allocator]") {
  auto alloc = *af::make_cpu_allocator();
  {
    auto a = af::tensor::empty({1 << 20}, af::dtype::u8, alloc);
    auto b = af::tensor::empty({1 << 20}, af::dtype::u8, alloc);
    REQUIRE((a && b));
  }
  CHECK(alloc->stats().peak_bytes_in_use >= 2u << 20);
  alloc->reset_peak();
  CHECK(alloc->stats().peak_bytes_in_use == 0);
  alloc->release_cached();
  CHECK(alloc->stats().bytes_reserved == 0);
}

TEST_CASE("allocations beyond the memory limit fail with out_of_memory and a clear message", "[cpu][allocator]") {
  af::allocator_options options;
  options.memory_limit = 4 << 20;
  options.name = "test";
  auto alloc = *af::make_cpu_allocator(options);
  auto a = af::tensor::empty({3 << 20}, af::dtype::u8, alloc);
  REQUIRE(a);
  auto b = af::tensor::empty({2 << 20}, af::dtype::u8, alloc);
  REQUIRE_FALSE(b);
  CHECK(b.error_value().code == af::errc::out_of_memory);
  CHECK(b.error_value().message.find("test allocator") != std::string::npos);
  CHECK(b.error_value().message.find("limit of 4194304 bytes") != std::string::npos);
  a = af::tensor{};
  // The cached 3 MiB block is released to make room for a differently sized request.
  CHECK(af::tensor::empty({4 << 20}, af::dtype::u8, alloc));
}

TEST_CASE("the preallocated arena sub-allocates, coalesces freed neighbours and enforces its size", "[cpu][allocator]") {
  af::allocator_options options;
  options.policy = af::alloc_policy::preallocate;
  options.memory_limit = 1 << 20;
  auto alloc = *af::make_cpu_allocator(options);
  CHECK(alloc->stats().bytes_reserved == 1 << 20);
  std::vector<af::tensor> parts;
  for (int i = 0; i < 4; ++i) parts.push_back(*af::tensor::empty({256 << 10}, af::dtype::u8, alloc));
  CHECK_FALSE(af::tensor::empty({1}, af::dtype::u8, alloc));
  parts[1] = af::tensor{};
  parts[2] = af::tensor{};
  // Two freed neighbours coalesce into one 512 KiB range.
  auto big = af::tensor::empty({512 << 10}, af::dtype::u8, alloc);
  REQUIRE(big);
  CHECK(static_cast<char*>(big->raw_data()) == static_cast<char*>(parts[0].raw_data()) + (256 << 10));
  parts.clear();
  big = af::tensor{};
  CHECK(alloc->stats().bytes_in_use == 0);
  CHECK(af::tensor::empty({1 << 20}, af::dtype::u8, alloc));
}

TEST_CASE("preallocate without a limit is an invalid_argument error", "[cpu][allocator]") {
  af::allocator_options options;
  options.policy = af::alloc_policy::preallocate;
  auto alloc = af::make_cpu_allocator(options);
  REQUIRE_FALSE(alloc);
  CHECK(alloc.error_value().code == af::errc::invalid_argument);
}

TEST_CASE("concurrent allocation and release keep the statistics consistent", "[cpu][allocator]") {
  for (auto policy : {af::alloc_policy::grow, af::alloc_policy::preallocate}) {
    af::allocator_options options;
    options.policy = policy;
    options.memory_limit = 64 << 20;
    auto alloc = *af::make_cpu_allocator(options);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        std::mt19937 gen(static_cast<unsigned>(t));
        std::vector<af::tensor> live;
        for (int i = 0; i < 2000; ++i) {
          if (live.size() > 8 || (gen() % 3 == 0 && !live.empty())) live.erase(live.begin());
          auto x = af::tensor::empty({static_cast<int64_t>(gen() % 100000)}, af::dtype::u8, alloc);
          if (x) live.push_back(*x);
        }
      });
    for (auto& th : threads) th.join();
    auto stats = alloc->stats();
    CHECK(stats.bytes_in_use == 0);
    CHECK(stats.allocations == stats.deallocations);
  }
}

TEST_CASE("an allocator scope routes this thread's default allocations and nests", "[cpu][allocator]") {
  auto outer = *af::make_cpu_allocator();
  auto inner = *af::make_cpu_allocator();
  {
    af::allocator_scope a{outer};
    auto x = af::tensor::empty({100}, af::dtype::f32);
    CHECK(outer->stats().allocations == 1);
    {
      af::allocator_scope b{inner};
      auto y = af::tensor::empty({100}, af::dtype::f32);
      CHECK(inner->stats().allocations == 1);
      std::thread other([&] { CHECK(af::cpu_allocator() != inner); });
      other.join();
    }
    auto z = af::tensor::empty({100}, af::dtype::f32);
    CHECK(outer->stats().allocations == 2);
  }
  CHECK(af::cpu_allocator() != outer);
}

TEST_CASE("blocks handed between threads keep the statistics consistent and all return at the end",
          "[cpu][allocator]") {
  auto alloc = *af::make_cpu_allocator();  // no limit: small blocks also wait in per-thread caches
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<af::tensor> handed;
  bool done = false;
  std::thread producer([&] {
    std::mt19937 gen(3);
    for (int i = 0; i < 20000; ++i) {
      auto t = af::tensor::empty({static_cast<int64_t>(64 + gen() % 3 * 4096)}, af::dtype::u8, alloc);
      REQUIRE(t);
      std::unique_lock<std::mutex> lock{mtx};
      cv.wait(lock, [&] { return handed.size() < 64; });
      handed.push_back(std::move(*t));
      cv.notify_all();
    }
    std::lock_guard<std::mutex> lock{mtx};
    done = true;
    cv.notify_all();
  });
  std::thread consumer([&] {  // frees what the producer allocated
    for (;;) {
      std::unique_lock<std::mutex> lock{mtx};
      cv.wait(lock, [&] { return !handed.empty() || done; });
      if (handed.empty()) return;
      handed.pop_front();
      cv.notify_all();
    }
  });
  producer.join();
  consumer.join();
  auto stats = alloc->stats();
  CHECK(stats.bytes_in_use == 0);
  CHECK(stats.allocations == 20000);
  CHECK(stats.allocations == stats.deallocations);
  CHECK(stats.cache_hits + stats.cache_misses == stats.allocations);
  CHECK(stats.bytes_cached == stats.bytes_reserved);  // the exited threads gave their blocks back
  CHECK(stats.cache_misses < 1000);                   // blocks came back around, not from the system
  alloc->release_cached();
  CHECK(alloc->stats().bytes_reserved == 0);
}

TEST_CASE("a thread may keep cached blocks of an allocator that is gone", "[cpu][allocator]") {
  auto alloc = *af::make_cpu_allocator();
  std::mutex mtx;
  std::condition_variable cv;
  int step = 0;
  std::thread worker([&] {
    for (int i = 0; i < 10; ++i) (void)af::tensor::empty({1000}, af::dtype::f32, alloc);  // freed into this thread's cache
    std::unique_lock<std::mutex> lock{mtx};
    step = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return step == 2; });
  });  // exits after the allocator is destroyed: its cached block goes to the system
  {
    std::unique_lock<std::mutex> lock{mtx};
    cv.wait(lock, [&] { return step == 1; });
  }
  std::weak_ptr<af::allocator> gone = alloc;
  alloc.reset();
  CHECK(gone.expired());
  {
    std::lock_guard<std::mutex> lock{mtx};
    step = 2;
    cv.notify_all();
  }
  worker.join();
}
