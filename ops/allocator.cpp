#include "ops/allocator.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <vector>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace af {

namespace {

constexpr std::size_t alignment = 64;
constexpr std::size_t small_limit = std::size_t{1} << 20;

// Sizes are rounded so that blocks of nearly equal size are interchangeable in the cache.
std::size_t round_size(std::size_t nbytes) {
  if (nbytes == 0) return alignment;
  if (nbytes < small_limit) return (nbytes + 511) & ~std::size_t{511};
  constexpr std::size_t big_step = std::size_t{1} << 16;
  return (nbytes + big_step - 1) & ~(big_step - 1);
}

std::string describe(std::size_t bytes) {
  return std::to_string(bytes) + " bytes";
}

// What both CPU policies share: options, the lock and the statistics it guards.
class cpu_allocator_base : public allocator {
 public:
  explicit cpu_allocator_base(allocator_options options) : options_(std::move(options)) {}
  allocator_stats stats() const override {
    std::lock_guard<std::mutex> guard{mtx_};
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> guard{mtx_};
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }
  device dev() const override { return device::cpu(); }

 protected:
  void note_in_use(std::size_t block) {
    stats_.bytes_in_use += block;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }

  allocator_options options_;
  mutable std::mutex mtx_;
  allocator_stats stats_;
};

// Freed blocks up to this size also wait in a per-thread cache, so that a thread that frees and
// allocates blocks of one size (a pipeline stage making a tensor per element) takes no lock.
constexpr std::size_t thread_cached_max_block = std::size_t{256} << 10;
constexpr std::size_t thread_bin_blocks = 32;  // blocks one thread keeps per size
constexpr std::size_t thread_bins = 8;         // sizes one thread keeps
std::atomic<uint64_t> next_allocator_id{1};

class cpu_caching_allocator;

// One size of one allocator in one thread's cache.
struct thread_bin {
  uint64_t owner = 0;  // the allocator's id (never reused); 0: unused
  std::weak_ptr<allocator> alive;
  std::size_t size = 0;
  std::vector<void*> blocks;
  uint64_t last_use = 0;
};

// This thread's bins. Blocks go back to their allocator when a bin is evicted or the thread ends
// (or to the system when the allocator is gone by then).
struct thread_cache {
  std::array<thread_bin, thread_bins> bins;
  uint64_t tick = 0;
  ~thread_cache();
  thread_bin* find(uint64_t owner, std::size_t size) {
    for (auto& b : bins)
      if (b.owner == owner && b.size == size) {
        b.last_use = ++tick;
        return &b;
      }
    return nullptr;
  }
  thread_bin& claim(uint64_t owner, std::size_t size, std::weak_ptr<allocator> alive);
  void flush(thread_bin& bin);
};

thread_local thread_cache this_thread_cache;
// Set once this thread's cache is destroyed (thread exit): a block freed later by another
// thread-local's destructor goes to the shared cache instead.
thread_local bool this_thread_cache_gone = false;

// Caches freed blocks by size class and hands them out again: after warm-up a steady pipeline
// allocates nothing from the system. Each block carries its size in a header just before the
// address handed out, so freeing looks nothing up. Without a memory limit, small blocks are also
// cached per thread (a limit needs every cached block where drop_cache can reach it).
class cpu_caching_allocator final : public cpu_allocator_base {
 public:
  using cpu_allocator_base::cpu_allocator_base;

  allocator_stats stats() const override {
    allocator_stats s;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      s = stats_;
    }
    s.bytes_in_use = hot_.in_use.load(std::memory_order_relaxed);
    s.peak_bytes_in_use = hot_.peak.load(std::memory_order_relaxed);
    s.bytes_cached = hot_.cached.load(std::memory_order_relaxed);
    s.allocations = hot_.allocations.load(std::memory_order_relaxed);
    s.deallocations = hot_.deallocations.load(std::memory_order_relaxed);
    s.cache_hits = hot_.hits.load(std::memory_order_relaxed);
    return s;
  }
  void reset_peak() override { hot_.peak.store(hot_.in_use.load(std::memory_order_relaxed), std::memory_order_relaxed); }
  void release_cached() override {
    for (auto& bin : this_thread_cache.bins)
      if (bin.owner == id_) this_thread_cache.flush(bin);
    std::lock_guard<std::mutex> guard{mtx_};
    drop_cache();
  }
  ~cpu_caching_allocator() override { drop_cache(); }

  // Takes blocks of `size` back from a thread's cache.
  void give_back(std::size_t size, std::vector<void*>& blocks) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto& list = cache_[size];
    list.insert(list.end(), blocks.begin(), blocks.end());
    blocks.clear();
  }
  static void free_to_system(void* ptr) noexcept { std::free(static_cast<char*>(ptr) - header); }

 protected:
  expected<void*> allocate_block(std::size_t nbytes) override {
    const std::size_t size = round_size(nbytes);
    hot_.allocations.fetch_add(1, std::memory_order_relaxed);
    thread_bin* bin = nullptr;
    if (threaded(size)) {
      bin = this_thread_cache.find(id_, size);
      if (bin && !bin->blocks.empty()) {
        void* ptr = bin->blocks.back();
        bin->blocks.pop_back();
        note_hit(size);
        return ptr;
      }
      if (!bin) bin = &claim_bin(size);  // before the lock: claiming may give blocks back to us
    }
    std::lock_guard<std::mutex> guard{mtx_};
    if (bin) {
      // Take a few more of this size into the thread's cache for the next allocations.
      auto it = cache_.find(size);
      while (it != cache_.end() && it->second.size() > 1 && bin->blocks.size() < thread_bin_blocks / 2) {
        bin->blocks.push_back(it->second.back());
        it->second.pop_back();
      }
    }
    // Reuse a cached block that is not much larger than asked for.
    for (auto it = cache_.lower_bound(size); it != cache_.end() && it->first <= size + size / 4 + 4096; ++it) {
      if (it->second.empty()) continue;
      void* ptr = it->second.back();
      it->second.pop_back();
      note_hit(it->first);
      return ptr;
    }
    const std::size_t reserved = stats_.bytes_reserved;
    if (options_.memory_limit && reserved + size > options_.memory_limit) drop_cache();
    if (options_.memory_limit && stats_.bytes_reserved + size > options_.memory_limit)
      return make_error(errc::out_of_memory,
                        options_.name + " allocator: cannot allocate " + describe(nbytes) + " with " +
                            describe(hot_.in_use.load(std::memory_order_relaxed)) + " in use under a limit of " +
                            describe(options_.memory_limit));
    auto* base = static_cast<char*>(std::aligned_alloc(alignment, size + header));
    if (!base)
      return make_error(errc::out_of_memory,
                        options_.name + " allocator: the system refused " + describe(nbytes));
    std::memcpy(base, &size, sizeof size);
    ++stats_.cache_misses;
    stats_.bytes_reserved += size;
    note_in_use(size);
    return base + header;
  }

  void free_block(void* ptr, std::size_t) noexcept override {
    if (!ptr) return;
    const std::size_t block = block_size(ptr);
    hot_.deallocations.fetch_add(1, std::memory_order_relaxed);
    hot_.in_use.fetch_sub(block, std::memory_order_relaxed);
    hot_.cached.fetch_add(block, std::memory_order_relaxed);
    if (threaded(block)) {
      thread_bin* bin = this_thread_cache.find(id_, block);
      if (!bin) bin = &claim_bin(block);
      if (bin->blocks.size() < thread_bin_blocks) {
        bin->blocks.push_back(ptr);
        return;
      }
      // Full: half of it goes back in one locked step.
      std::lock_guard<std::mutex> guard{mtx_};
      auto& list = cache_[block];
      for (std::size_t k = 0; k < thread_bin_blocks / 2; ++k) {
        list.push_back(bin->blocks.back());
        bin->blocks.pop_back();
      }
      bin->blocks.push_back(ptr);
      return;
    }
    std::lock_guard<std::mutex> guard{mtx_};
    cache_[block].push_back(ptr);
  }

 private:
  // Room before each block for its size, keeping the block itself aligned.
  static constexpr std::size_t header = alignment;

  // Counters every allocation and free touches, kept off the lock (one cache line).
  struct alignas(64) hot_counters {
    std::atomic<std::size_t> in_use{0}, peak{0}, cached{0}, allocations{0}, deallocations{0}, hits{0};
  };

  bool threaded(std::size_t size) const noexcept {
    return options_.memory_limit == 0 && size <= thread_cached_max_block && !this_thread_cache_gone;
  }
  thread_bin& claim_bin(std::size_t size) { return this_thread_cache.claim(id_, size, weak_from_this()); }

  void note_in_use(std::size_t block) {
    const std::size_t now = hot_.in_use.fetch_add(block, std::memory_order_relaxed) + block;
    std::size_t peak = hot_.peak.load(std::memory_order_relaxed);
    while (now > peak && !hot_.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void note_hit(std::size_t block) {
    hot_.hits.fetch_add(1, std::memory_order_relaxed);
    hot_.cached.fetch_sub(block, std::memory_order_relaxed);
    note_in_use(block);
  }

  static std::size_t block_size(void* ptr) noexcept {
    std::size_t size = 0;
    std::memcpy(&size, static_cast<char*>(ptr) - header, sizeof size);
    return size;
  }

  void drop_cache() {
    std::size_t dropped = 0;
    for (auto& [size, blocks] : cache_) {
      for (void* ptr : blocks) free_to_system(ptr);
      stats_.bytes_reserved -= size * blocks.size();
      dropped += size * blocks.size();
    }
    hot_.cached.fetch_sub(std::min(dropped, hot_.cached.load(std::memory_order_relaxed)), std::memory_order_relaxed);
    cache_.clear();
  }

  const uint64_t id_ = next_allocator_id.fetch_add(1, std::memory_order_relaxed);
  hot_counters hot_;
  std::map<std::size_t, std::vector<void*>> cache_;  // block size -> free blocks of that size
};

void thread_cache::flush(thread_bin& bin) {
  if (!bin.blocks.empty()) {
    if (auto owner = bin.alive.lock())
      static_cast<cpu_caching_allocator*>(owner.get())->give_back(bin.size, bin.blocks);
    for (void* ptr : bin.blocks) cpu_caching_allocator::free_to_system(ptr);  // its allocator is gone
    bin.blocks.clear();
  }
  bin.owner = 0;
  bin.alive.reset();
}

thread_bin& thread_cache::claim(uint64_t owner, std::size_t size, std::weak_ptr<allocator> alive) {
  thread_bin* pick = &bins[0];
  for (auto& b : bins) {
    if (b.owner == 0) {
      pick = &b;
      break;
    }
    if (b.last_use < pick->last_use) pick = &b;
  }
  flush(*pick);
  pick->owner = owner;
  pick->alive = std::move(alive);
  pick->size = size;
  pick->blocks.reserve(thread_bin_blocks);
  pick->last_use = ++tick;
  return *pick;
}

thread_cache::~thread_cache() {
  this_thread_cache_gone = true;
  for (auto& b : bins) flush(b);
}

// One arena reserved and touched at start; best-fit sub-allocation with coalescing of free ranges.
class cpu_arena_allocator final : public cpu_allocator_base {
 public:
  using cpu_allocator_base::cpu_allocator_base;

  expected<void> init() {
    std::size_t size = round_size(options_.memory_limit);
    arena_ = static_cast<char*>(std::aligned_alloc(alignment, size));
    if (!arena_)
      return make_error(errc::out_of_memory, options_.name + " allocator: cannot preallocate " +
                                                 describe(options_.memory_limit));
    std::memset(arena_, 0, size);  // touch every page now, not in the first training step
    size_ = size;
    stats_.bytes_reserved = size;
    add_free(0, size);
    return {};
  }
  ~cpu_arena_allocator() override { std::free(arena_); }

  void release_cached() override {}

 protected:
  expected<void*> allocate_block(std::size_t nbytes) override {
    std::size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> guard{mtx_};
    ++stats_.allocations;
    auto it = by_size_.lower_bound(size);
    if (it == by_size_.end())
      return make_error(errc::out_of_memory,
                        options_.name + " allocator: cannot allocate " + describe(nbytes) +
                            " from a preallocated arena of " + describe(size_) + " with " +
                            describe(stats_.bytes_in_use) + " in use");
    auto [free_size, offset] = *it;
    remove_free(offset, free_size);
    if (free_size > size) add_free(offset + size, free_size - size);
    live_[offset] = size;
    ++stats_.cache_hits;
    note_in_use(size);
    stats_.bytes_cached = size_ - stats_.bytes_in_use;
    return static_cast<void*>(arena_ + offset);
  }

  void free_block(void* ptr, std::size_t) noexcept override {
    std::lock_guard<std::mutex> guard{mtx_};
    std::size_t offset = static_cast<std::size_t>(static_cast<char*>(ptr) - arena_);
    auto it = live_.find(offset);
    if (it == live_.end()) return;
    std::size_t size = it->second;
    live_.erase(it);
    ++stats_.deallocations;
    stats_.bytes_in_use -= size;
    stats_.bytes_cached = size_ - stats_.bytes_in_use;
    // Coalesce with the free neighbours on both sides.
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && next->first == offset + size) {
      std::size_t next_size = next->second;
      remove_free(next->first, next_size);
      size += next_size;
    }
    auto prev = by_offset_.lower_bound(offset);
    if (prev != by_offset_.begin()) {
      --prev;
      if (prev->first + prev->second == offset) {
        std::size_t prev_offset = prev->first, prev_size = prev->second;
        remove_free(prev_offset, prev_size);
        offset = prev_offset;
        size += prev_size;
      }
    }
    add_free(offset, size);
  }

 private:
  void add_free(std::size_t offset, std::size_t size) {
    by_offset_[offset] = size;
    by_size_.emplace(size, offset);
  }
  void remove_free(std::size_t offset, std::size_t size) {
    by_offset_.erase(offset);
    auto [lo, hi] = by_size_.equal_range(size);
    for (auto it = lo; it != hi; ++it)
      if (it->second == offset) {
        by_size_.erase(it);
        break;
      }
  }

  char* arena_ = nullptr;
  std::size_t size_ = 0;
  std::map<std::size_t, std::size_t> by_offset_;     // free range offset -> size
  std::multimap<std::size_t, std::size_t> by_size_;  // free range size -> offset
  std::map<std::size_t, std::size_t> live_;          // allocated offset -> size
};

std::mutex default_mtx;
// Bumped whenever the default allocator changes: threads re-read it only then, so that the hot
// path of every tensor allocation takes no lock.
std::atomic<uint64_t> default_version{1};

std::shared_ptr<allocator>& default_cpu_slot() {
  static std::shared_ptr<allocator> slot = *make_cpu_allocator();
  return slot;
}

}  // namespace

expected<std::shared_ptr<storage>> allocator::allocate(std::size_t nbytes) {
  auto block = allocate_block(nbytes);
  if (!block) return std::move(block).error_value();
  return std::make_shared<storage>(shared_from_this(), *block, nbytes);
}

expected<std::shared_ptr<allocator>> make_cpu_allocator(allocator_options options) {
  if (options.policy == alloc_policy::preallocate) {
    if (options.memory_limit == 0)
      return make_error(errc::invalid_argument,
                        options.name + " allocator: policy 'preallocate' needs a memory_limit");
    auto arena = std::make_shared<cpu_arena_allocator>(std::move(options));
    AF_TRY(arena->init());
    return std::shared_ptr<allocator>{std::move(arena)};
  }
  return std::shared_ptr<allocator>{std::make_shared<cpu_caching_allocator>(std::move(options))};
}

namespace {
thread_local std::shared_ptr<allocator> scoped_allocator;
}  // namespace

allocator_scope::allocator_scope(std::shared_ptr<allocator> alloc)
    : previous_(std::exchange(scoped_allocator, std::move(alloc))) {}

allocator_scope::~allocator_scope() { scoped_allocator = std::move(previous_); }

std::shared_ptr<allocator> scoped_cpu_allocator() { return scoped_allocator; }

const std::shared_ptr<allocator>& cpu_allocator() {
  if (scoped_allocator) return scoped_allocator;
  thread_local uint64_t seen_version = 0;
  thread_local std::shared_ptr<allocator> seen;
  const uint64_t now = default_version.load(std::memory_order_acquire);
  if (seen_version != now) {
    std::lock_guard<std::mutex> guard{default_mtx};
    seen = default_cpu_slot();
    seen_version = default_version.load(std::memory_order_relaxed);
  }
  return seen;
}

void set_cpu_allocator(std::shared_ptr<allocator> alloc) {
  std::lock_guard<std::mutex> guard{default_mtx};
  default_cpu_slot() = std::move(alloc);
  default_version.fetch_add(1, std::memory_order_release);
}

storage::storage(std::shared_ptr<allocator> owner, void* data, std::size_t nbytes) noexcept
    : data_(data), nbytes_(nbytes), dev_(owner->dev()), owner_(std::move(owner)) {}

storage::storage(void* data, std::size_t nbytes, device dev, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), dev_(dev), deleter_(std::move(deleter)) {}

storage::~storage() {
  if (owner_) owner_->free_block(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}

}  // namespace af
