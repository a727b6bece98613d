#pragma once

// An actor's consecutive messages may run on different scheduler threads. CAF orders them (the
// mailbox and the work-stealing queues), but inside Debian's uninstrumented libcaf_core, so
// ThreadSanitizer sees an actor's state written on one worker and read on the next as a race.
// Those reports carry CAF's dispatch frames and tests/tsan.supp hides them, but only while TSan
// can still restore the earlier access's stack: once its history has rolled over, the report has
// no frames to match and fails the run (seen as a rare flake: an element created by a source on
// one worker, sent from another, freed by the reader). `resume_ordered<Base>` declares the order
// CAF provides: every handled message, the behaviour's start and the final cleanup acquire the
// actor's address first and release it after. Outside TSan builds it is `Base` itself.
//
// Use it as the actor type of a function-based actor:
//   using sink_actor = resume_ordered<caf::stateful_actor<sink_state>>;

#include <caf/actor_config.hpp>
#include <caf/error.hpp>
#include <caf/mailbox_element.hpp>

#include <utility>

#include "actors/tsan_handoff.hpp"

namespace af::detail {

#if defined(__SANITIZE_THREAD__)

template <class Base>
class resume_ordered : public Base {
 public:
  template <class... Ts>
  explicit resume_ordered(caf::actor_config& cfg, Ts&&... xs) : Base(cfg, std::forward<Ts>(xs)...) {
    tsan_release(this);  // the state was built on the spawning thread
  }
  ~resume_ordered() override { tsan_acquire(this); }

  void initialize() override {
    tsan_acquire(this);
    Base::initialize();
    tsan_release(this);
  }

  using Base::consume;
  caf::invoke_message_result consume(caf::mailbox_element& x) override {
    tsan_acquire(this);
    auto result = Base::consume(x);
    tsan_release(this);
    return result;
  }

  bool cleanup(caf::error&& fail_state, caf::execution_unit* host) override {
    tsan_acquire(this);
    const bool done = Base::cleanup(std::move(fail_state), host);
    tsan_release(this);
    return done;
  }
};

#else

template <class Base>
using resume_ordered = Base;

#endif

}  // namespace af::detail
