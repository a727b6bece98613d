#pragma once

// The credit-based flow-control protocol between actors (a consumer grants credit, a producer sends
// at most that many items). Include only from actor translation units (pulls in CAF).
//
// Messages (every item is one af::element; a batch of k elements uses k credits):
//   consumer -> producer   (demand_atom, uint64_t n)          grants n more credits
//   consumer -> producer   (cancel_atom)                      stop producing and terminate
//   producer -> consumer   (batch_atom, std::vector<element>) at most the credit outstanding
//   producer -> consumer   (end_atom)                         no more items (needs no credit)
//   producer -> consumer   (fail_atom, caf::error)            the stream failed (af::errc + context)
//   consumer -> producer   (snapshot_atom)                    put a mark into your output (the
//                                                            request travels up to the source)
//   producer -> consumer   (mark_atom, snapshot_ptr)          a mark, after the items sent before
//                                                            it (needs no credit); each stage adds
//                                                            its saved state as the mark passes
//
// Binding: a producer serves exactly one consumer, the sender of the first demand. It monitors that
// consumer (its death counts as cancel); the consumer monitors its producer (a producer that dies
// without end or fail becomes errc::peer_down downstream). A consumer that receives more items
// than it granted answers with errc::protocol_violation (and cancels); so does a producer that gets
// demand from a second consumer. After end or fail the producer terminates.

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/actor_cast.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"  // inspect(element): batches are messages
#include "actors/stage.hpp"
#include "actors/tsan_handoff.hpp"
#include "ops/element.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<af::chain_snapshot>)

namespace af::flow {

using demand_atom = caf::atom_constant<caf::atom("af_demand")>;
using cancel_atom = caf::atom_constant<caf::atom("af_cancel")>;
using batch_atom = caf::atom_constant<caf::atom("af_batch")>;
using end_atom = caf::atom_constant<caf::atom("af_end")>;
using fail_atom = caf::atom_constant<caf::atom("af_fail")>;
using snapshot_atom = caf::atom_constant<caf::atom("af_snap")>;
using mark_atom = caf::atom_constant<caf::atom("af_mark")>;
/// One owner at a time: the stage the mark is passing adds its state, then sends it on.
using snapshot_ptr = std::shared_ptr<chain_snapshot>;

/// The producer end of one flow: the bound consumer and the credit it granted.
class outbound {
 public:
  /// Accepts `n` credits from `sender`, binding it as the consumer on first demand. Returns false
  /// when `sender` is not the bound consumer (the caller reports a protocol violation to it).
  template <class Self>
  bool on_demand(Self* self, const caf::strong_actor_ptr& sender, uint64_t n) {
    if (!sender) return false;
    auto who = caf::actor_cast<caf::actor>(sender);
    if (!consumer_) {
      consumer_ = who;
      self->monitor(consumer_);
    } else if (consumer_ != who) {
      return false;
    }
    credit_ += n;
    return true;
  }
  bool bound() const noexcept { return static_cast<bool>(consumer_); }
  const caf::actor& consumer() const noexcept { return consumer_; }
  uint64_t credit() const noexcept { return credit_; }

  /// Sends as many buffered elements as the credit allows (at most `limit`), in one batch;
  /// returns how many.
  template <class Self>
  std::size_t push(Self* self, std::deque<element>& buffer, std::size_t limit = SIZE_MAX) {
    const auto n = static_cast<std::size_t>(std::min<uint64_t>(credit_, std::min(buffer.size(), limit)));
    if (n == 0 || !consumer_) return 0;
    std::vector<element> batch;
    batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(buffer.front()));
      buffer.pop_front();
    }
    credit_ -= n;
    detail::tsan_release(batch.data());
    self->send(consumer_, batch_atom::value, std::move(batch));
    return n;
  }
  /// End (an empty error) or failure, sent once; needs no credit.
  template <class Self>
  void finish(Self* self, const caf::error& err) {
    if (!consumer_) return;
    if (err)
      self->send(consumer_, fail_atom::value, err);
    else
      self->send(consumer_, end_atom::value);
  }

 private:
  caf::actor consumer_;
  uint64_t credit_ = 0;
};

/// The smallest demand worth sending to a producer for a consumer with `slots` slots: a quarter.
inline uint64_t demand_step(std::size_t slots) noexcept { return std::max<uint64_t>(1, slots / 4); }

/// The consumer end of one flow: the producer, the credit granted and not yet used.
class inbound {
 public:
  inbound() = default;
  explicit inbound(caf::actor producer) : producer_(std::move(producer)) {}

  /// Monitors the producer; call once from the owning actor before the first demand.
  template <class Self>
  void attach(Self* self) {
    if (producer_) self->monitor(producer_);
  }
  const caf::actor& producer() const noexcept { return producer_; }
  uint64_t granted() const noexcept { return granted_; }

  /// Raises the outstanding credit to `target` (never lowers it); demands only the difference, and
  /// only once it is at least `min_step` or the producer has no credit left: each demand may wake
  /// the producer's thread, and top-ups of an element or two kept producers waking per element.
  template <class Self>
  void grant_up_to(Self* self, uint64_t target, uint64_t min_step = 1) {
    if (!producer_ || closed_ || target <= granted_) return;
    const uint64_t more = target - granted_;
    if (more < min_step && granted_ > 0) return;
    granted_ = target;
    self->send(producer_, demand_atom::value, more);
  }
  /// Counts an arriving batch against the credit; an error naming `who` if it exceeds it.
  caf::error on_batch(const std::vector<element>& items, const std::string& who) {
    detail::tsan_acquire(items.data());  // pairs with the release in outbound::push
    return on_batch(items.size(), who);
  }
  /// Counts `n` arriving items against the credit; an error naming `who` if they exceed it.
  caf::error on_batch(std::size_t n, const std::string& who) {
    if (n > granted_) {
      return make_caf_error(errc::protocol_violation,
                            "stage '" + who + "': received " + std::to_string(n) +
                                " items with only " + std::to_string(granted_) + " credits granted");
    }
    granted_ -= n;
    return {};
  }
  /// The producer sent end or fail: no more demand goes out.
  void close() noexcept { closed_ = true; }
  bool closed() const noexcept { return closed_; }
  /// Asks the producer to stop (once) and stops granting.
  template <class Self>
  void cancel(Self* self) {
    if (producer_ && !closed_) self->send(producer_, cancel_atom::value);
    closed_ = true;
  }

 private:
  caf::actor producer_;
  uint64_t granted_ = 0;
  bool closed_ = false;
};

}  // namespace af::flow
