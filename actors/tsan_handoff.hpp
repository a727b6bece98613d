#pragma once

// ThreadSanitizer cannot see the happens-before edges that CAF's uninstrumented libraries provide
// between the thread that sends a tensor to a remote actor and the middleman that serialises it,
// and between the middleman that deserialises one and the actor that handles it: the payload is
// copied by a memcpy inside libcaf_core and handed over through libcaf_io's queues. Without help
// TSan reports every payload byte on the far side of each edge as a race; the reports are
// suppressed (tests/tsan.supp), but collecting them for a 4 MiB tensor takes minutes and stalls the
// stream. Each side of an edge releases or acquires the payload's address, declaring to TSan the
// ordering CAF provides. Outside TSan builds these calls compile to nothing.

#include "ops/tensor.hpp"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace af::detail {

/// The same for any object handed over inside a local CAF message (a batch of elements): CAF's
/// mailbox is lock-free inside the uninstrumented library, so TSan sees no ordering between the
/// sender's writes and the receiver's reads. Release before sending, acquire on receipt, on an
/// address both sides know (a vector's data() survives the moves into and out of the message).
inline void tsan_release([[maybe_unused]] const void* addr) noexcept {
#if defined(__SANITIZE_THREAD__)
  if (addr) __tsan_release(const_cast<void*>(addr));
#endif
}

inline void tsan_acquire([[maybe_unused]] const void* addr) noexcept {
#if defined(__SANITIZE_THREAD__)
  if (addr) __tsan_acquire(const_cast<void*>(addr));
#endif
}

inline void tsan_release_payload([[maybe_unused]] const tensor& t) noexcept {
#if defined(__SANITIZE_THREAD__)
  if (t.nbytes() > 0) __tsan_release(t.raw_data());
#endif
}

inline void tsan_acquire_payload([[maybe_unused]] const tensor& t) noexcept {
#if defined(__SANITIZE_THREAD__)
  if (t.nbytes() > 0) __tsan_acquire(t.raw_data());
#endif
}

}  // namespace af::detail
