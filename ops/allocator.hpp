#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ops/device.hpp"
#include "ops/error.hpp"

namespace af {

class storage;

/// How a device allocator obtains memory.
enum class alloc_policy : uint8_t {
  grow,         ///< take memory from the system on demand and cache freed blocks for reuse
  preallocate,  ///< reserve and touch `memory_limit` bytes up front; sub-allocate from that arena
};

struct allocator_options {
  alloc_policy policy = alloc_policy::grow;
  /// Most bytes the allocator may hold (in use plus cached); 0 means no limit (grow only).
  std::size_t memory_limit = 0;
  /// Name used in error messages and statistics ("cpu").
  std::string name = "cpu";
};

struct allocator_stats {
  std::size_t bytes_in_use = 0;       ///< handed out and not yet returned
  std::size_t peak_bytes_in_use = 0;  ///< high-water mark of bytes_in_use since the last reset
  std::size_t bytes_reserved = 0;     ///< held from the system: in use + cached (the arena, when preallocated)
  std::size_t bytes_cached = 0;       ///< returned blocks kept for reuse
  std::size_t allocations = 0;
  std::size_t deallocations = 0;
  std::size_t cache_hits = 0;    ///< allocations served without asking the system
  std::size_t cache_misses = 0;  ///< allocations that took fresh memory from the system
};

/// A device memory allocator. Storage returned by allocate() gives its block back on destruction.
class allocator : public std::enable_shared_from_this<allocator> {
 public:
  virtual ~allocator() = default;
  /// A block of at least `nbytes` bytes, 64-byte aligned; out_of_memory beyond the limit.
  expected<std::shared_ptr<storage>> allocate(std::size_t nbytes);
  virtual allocator_stats stats() const = 0;
  virtual void reset_peak() = 0;
  /// Returns cached blocks to the system (no effect on a preallocated arena).
  virtual void release_cached() = 0;
  virtual device dev() const = 0;

 protected:
  friend class storage;
  virtual expected<void*> allocate_block(std::size_t nbytes) = 0;
  virtual void free_block(void* ptr, std::size_t nbytes) noexcept = 0;
};

/// The CPU's caching allocator: the "grow" or "preallocate" policy with a memory limit.
/// Fresh pages cost microseconds each to touch on our machines, so freed blocks are kept and reused.
/// invalid_argument for "preallocate" without a limit; out_of_memory when the arena cannot be had.
expected<std::shared_ptr<allocator>> make_cpu_allocator(allocator_options options = {});

/// The CPU allocator used when none is given: this thread's allocator_scope if one is active,
/// else the process-wide one.
/// The reference stays valid on this thread until the scope or the process-wide allocator changes;
/// returning it uncopied spares each tensor an atomic reference count round trip on a count that
/// every thread shares.
const std::shared_ptr<allocator>& cpu_allocator();

/// While alive, allocations on this thread that name no allocator come from `alloc` (a device
/// actor wraps each kernel call in one, so outputs and temporaries count against its limit
/// without a copy). Scopes nest; each restores the previous one.
class allocator_scope {
 public:
  explicit allocator_scope(std::shared_ptr<allocator> alloc);
  ~allocator_scope();
  allocator_scope(const allocator_scope&) = delete;
  allocator_scope& operator=(const allocator_scope&) = delete;

 private:
  std::shared_ptr<allocator> previous_;
};
/// This thread's innermost allocator_scope's allocator; null outside any (a request that runs work on
/// another thread carries it there).
std::shared_ptr<allocator> scoped_cpu_allocator();
/// Replaces the process-wide CPU allocator (storage from the old one stays valid).
void set_cpu_allocator(std::shared_ptr<allocator> alloc);

/// A contiguous buffer on a device. Owns its bytes through an allocator or a custom deleter.
class storage {
 public:
  storage(std::shared_ptr<allocator> owner, void* data, std::size_t nbytes) noexcept;
  /// Wraps memory owned elsewhere (a memory-mapped file, a network buffer).
  storage(void* data, std::size_t nbytes, device dev, std::function<void(void*)> deleter);
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;
  ~storage();

  void* data() const noexcept { return data_; }
  std::size_t nbytes() const noexcept { return nbytes_; }
  device dev() const noexcept { return dev_; }

 private:
  void* data_;
  std::size_t nbytes_;
  device dev_;
  std::shared_ptr<allocator> owner_;
  std::function<void(void*)> deleter_;
};

}  // namespace af
