// A sink: the consuming end of a pipeline. It grants credit for `slots` elements and hands what
// arrives to a target: a callback (credit comes back at once) or a blocking reader's queue (credit
// comes back when the reader releases elements, so a stalled reader stalls the whole pipeline).

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <optional>

#include "actors/resume_ordered.hpp"
#include "actors/stage_actor.hpp"

namespace af::detail {

namespace {

// -- state --------------------------------------------------------------------------------------

struct sink_state {
  std::string name;
  std::size_t slots = 1;
  std::size_t held = 0;  // delivered to the target and not yet released
  flow::inbound in;
  std::size_t marks_awaited = 0;  // snapshot requests passed upstream and not yet answered
  std::shared_ptr<sink_target> target;
  std::shared_ptr<stage_metrics> metrics;
  std::unique_ptr<trace::activity> act;
  trace::name_id deliver_name = trace::intern("deliver");
  trace::name_id waiting_name = trace::intern("waiting for input");
  bool finished = false;
  // End or failure that arrived while the target was paused with elements: it follows them.
  std::optional<error> deferred_end;
};

using sink_actor = detail::resume_ordered<caf::stateful_actor<sink_state>>;

// -- behaviour ----------------------------------------------------------------------------------

// Marks upstream will never send (it ended, failed or was cancelled) are started here: the
// whole chain had ended, or the stream had failed.
void answer_awaited_marks(sink_actor* self, const error& status) {
  auto& st = self->state;
  for (; st.marks_awaited > 0; --st.marks_awaited) {
    auto mark = std::make_shared<chain_snapshot>();
    mark->upstream_ended = true;
    if (status) mark->unsupported = "the stream had failed (" + status.message + ")";
    st.target->mark(std::move(mark));
  }
}

void finish(sink_actor* self, const error& status) {
  auto& st = self->state;
  answer_awaited_marks(self, status);
  if (!st.finished) {
    st.finished = true;
    st.act->leave();
    st.metrics->publish(*st.act, st.held);
    st.target->done(status);
  }
  self->quit();
}

// Upstream ended (or failed): the target hears it once it has consumed what it holds.
void upstream_finished(sink_actor* self, error status) {
  auto& st = self->state;
  st.in.close();
  if (st.target->holding() > 0) {
    answer_awaited_marks(self, status);  // a paused target may be waiting for one
    st.deferred_end = std::move(status);
    return;
  }
  finish(self, status);
}

// Counts what the target consumed out of what it held and delivered since `before`.
void count_consumed(sink_actor* self, std::size_t before_and_delivered) {
  auto& st = self->state;
  const std::size_t consumed = before_and_delivered - std::min(before_and_delivered, st.target->holding());
  st.held -= std::min(st.held, consumed);
  st.metrics->items_out.fetch_add(consumed, std::memory_order_relaxed);
}

void top_up(sink_actor* self) {
  auto& st = self->state;
  // While a snapshot's mark is on its way, what a paused target holds takes no credit: the
  // elements ahead of the mark must get through (at most what the stages held, plus `slots`).
  const std::size_t held = st.marks_awaited > 0 ? st.held - std::min(st.held, st.target->holding()) : st.held;
  if (held < st.slots) st.in.grant_up_to(self, st.slots - held, flow::demand_step(st.slots));
  // Waiting only counts while credit is out and nothing has come back for it. A reader's queue
  // records its own spans on the reader thread instead.
  if (st.in.granted() > 0 && st.target->releases_on_delivery())
    st.act->enter(trace::category::waiting_for_input, st.waiting_name);
  else
    st.act->leave();
  st.metrics->publish(*st.act, st.held);
}

caf::behavior sink_stage(sink_actor* self, std::string name, std::size_t slots, caf::actor upstream,
                         std::shared_ptr<sink_target> target, std::shared_ptr<stage_metrics> metrics) {
  auto& st = self->state;
  st.act = std::make_unique<trace::activity>(name);
  st.name = std::move(name);
  st.slots = slots < 1 ? 1 : slots;
  st.in = flow::inbound{std::move(upstream)};
  st.target = std::move(target);
  st.metrics = std::move(metrics);
  st.in.attach(self);
  st.held = st.target->holding();  // elements handed in first: the delivery starts with them
  if (st.target->paused()) self->send(self, resume_atom::value);
  top_up(self);
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& s = self->state;
    if (msg.source == s.in.producer().address() && !s.in.closed()) {
      s.in.close();
      finish(self, make_error(errc::peer_down, "sink '" + s.name +
                                                   "': upstream terminated without end (" +
                                                   to_string(msg.reason) + ")"));
    }
  });
  return {
      [self](flow::batch_atom, std::vector<element>& items) {
        auto& s = self->state;
        if (s.in.closed()) return;
        if (auto err = s.in.on_batch(items, s.name)) {
          s.in.cancel(self);
          finish(self, from_caf_error(err));
          return;
        }
        const std::size_t n = items.size();
        s.held += n;
        s.metrics->items_in.fetch_add(n, std::memory_order_relaxed);
        s.act->leave();
        const int64_t start = trace::now_ns();
        const std::size_t before = s.target->holding();
        auto delivered = s.target->deliver(std::move(items));
        if (s.target->releases_on_delivery()) {
          s.act->busy_since(start, s.deliver_name, static_cast<uint32_t>(n));
          count_consumed(self, before + n);
        }
        if (!delivered) {
          s.in.cancel(self);
          finish(self, delivered.error_value());
          return;
        }
        top_up(self);
      },
      [self](release_atom, uint64_t n) {
        auto& s = self->state;
        const auto k = static_cast<std::size_t>(std::min<uint64_t>(n, s.held));
        s.held -= k;
        s.metrics->items_out.fetch_add(k, std::memory_order_relaxed);
        top_up(self);
      },
      [self](flow::end_atom) { upstream_finished(self, {}); },
      [self](flow::fail_atom, const caf::error& err) { upstream_finished(self, from_caf_error(err)); },
      [self](resume_atom) {
        auto& s = self->state;
        if (s.finished || !s.target->paused()) return;
        const int64_t start = trace::now_ns();
        const std::size_t before = s.target->holding();
        auto resumed = s.target->resume();
        s.act->busy_since(start, s.deliver_name, static_cast<uint32_t>(before - std::min(before, s.target->holding())));
        count_consumed(self, before);
        if (!resumed) {
          if (!s.in.closed()) s.in.cancel(self);
          finish(self, resumed.error_value());
        } else if (s.deferred_end && !s.target->paused()) {
          finish(self, *s.deferred_end);
        } else {
          top_up(self);
        }
      },
      [self](flow::cancel_atom) {
        self->state.in.cancel(self);
        finish(self, make_error(errc::cancelled, "sink '" + self->state.name + "' was cancelled"));
      },
      [self](flow::snapshot_atom) {
        auto& s = self->state;
        ++s.marks_awaited;
        if (s.in.closed()) {
          answer_awaited_marks(self, {});
          return;
        }
        self->send(s.in.producer(), flow::snapshot_atom::value);
        top_up(self);
      },
      [self](flow::mark_atom, flow::snapshot_ptr& mark) {
        auto& s = self->state;
        if (s.in.closed() || s.marks_awaited == 0 || !mark) return;
        --s.marks_awaited;
        s.target->mark(std::move(mark));
      },
  };
}

}  // namespace

caf::actor spawn_sink(caf::actor_system& sys, std::string name, std::size_t slots,
                      caf::actor upstream, std::shared_ptr<sink_target> target,
                      std::shared_ptr<stage_metrics> metrics) {
  return sys.spawn(sink_stage, std::move(name), slots, std::move(upstream), std::move(target),
                   std::move(metrics));
}

}  // namespace af::detail
