// The blocking reader: a sink actor fills a bounded queue, a plain thread drains it. Credit returns
// to the sink only when the reader has taken elements, so the reader's pace is the pipeline's pace.

#include <caf/actor.hpp>
#include <caf/send.hpp>

#include <condition_variable>
#include <mutex>
#include <variant>

#include "actors/stage_actor.hpp"

namespace af {

namespace {

// Shared by the sink actor (producer side) and the reader thread.
class reader_queue final : public detail::sink_target {
 public:
  expected<void> deliver(std::vector<element>&& batch) override {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto& e : batch) items_.push_back(std::move(e));
    }
    cv_.notify_one();
    return {};
  }
  void done(const error& status) override {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (finished_) return;
      finished_ = true;
      status_ = status;
    }
    cv_.notify_one();
  }
  bool releases_on_delivery() const noexcept override { return false; }
  void mark(flow::snapshot_ptr mark) override {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      marks_.emplace_back(items_.size(), std::move(mark));
    }
    cv_.notify_one();
  }

  /// Waits for an element, a mark or the end, in the order they arrived. `before_wait` runs
  /// (unlocked) only if the call has to block.
  template <class F>
  std::variant<element, error, flow::snapshot_ptr> pop(F&& before_wait) {
    std::unique_lock<std::mutex> lock{mtx_};
    auto ready = [this] { return !items_.empty() || !marks_.empty() || finished_; };
    if (!ready()) {
      lock.unlock();
      before_wait();
      lock.lock();
      cv_.wait(lock, ready);
    }
    if (!marks_.empty() && marks_.front().first == 0) {
      auto mark = std::move(marks_.front().second);
      marks_.pop_front();
      return mark;
    }
    if (!items_.empty()) {
      element e = std::move(items_.front());
      items_.pop_front();
      for (auto& m : marks_) --m.first;
      return e;
    }
    return status_;
  }

 private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<element> items_;
  std::deque<std::pair<std::size_t, flow::snapshot_ptr>> marks_;  // elements ahead of each mark
  bool finished_ = false;
  error status_;
};

}  // namespace

struct element_stream::impl {
  impl(std::string name, std::size_t window)
      : slots(window), act(name), consume_name(trace::intern("consume")),
        waiting_name(trace::intern("waiting for input")) {}

  std::size_t slots;
  std::string snapshot_support;  // empty when every stage can take part in a snapshot
  std::shared_ptr<reader_queue> queue = std::make_shared<reader_queue>();
  topology topo;  // after queue: shut down first, while the queue still exists
  caf::actor sink;
  std::size_t unreleased = 0;
  bool finished = false;
  error status;
  trace::activity act;  // the reader thread's own spans: consuming vs waiting for the pipeline
  trace::name_id consume_name;
  trace::name_id waiting_name;

  void release() {
    if (unreleased == 0) return;
    caf::anon_send(sink, detail::release_atom::value, static_cast<uint64_t>(unreleased));
    unreleased = 0;
  }
  /// The next element, mark or end; an element's credit is released as it is taken.
  std::variant<element, error, flow::snapshot_ptr> pop() {
    auto got = queue->pop([&] {
      release();  // never block while holding credit the pipeline needs
      act.enter(trace::category::waiting_for_input, waiting_name);
    });
    if (std::holds_alternative<element>(got) && ++unreleased >= std::max<std::size_t>(1, slots / 2)) release();
    return got;
  }
  /// Records the end (errc::none) or the failure and collects the stages.
  expected<std::optional<element>> end(error why) {
    finished = true;
    status = std::move(why);
    topo.shutdown();  // every stage has finished or is finishing: collect them now
    if (status) return status;
    return std::optional<element>{};
  }
};

element_stream::element_stream(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
element_stream::element_stream(element_stream&&) noexcept = default;
element_stream& element_stream::operator=(element_stream&&) noexcept = default;

element_stream::~element_stream() {
  if (impl_) impl_->act.leave();
}

expected<std::optional<element>> element_stream::next() {
  auto& s = *impl_;
  if (s.finished) {
    if (s.status) return s.status;
    return std::optional<element>{};
  }
  s.act.leave();  // the caller's work since the last element ends here
  auto got = s.pop();
  while (std::holds_alternative<flow::snapshot_ptr>(got)) got = s.pop();  // a snapshot() gave up on it
  s.act.leave(std::holds_alternative<element>(got) ? 1 : 0);
  if (auto* e = std::get_if<element>(&got)) {
    s.act.enter(trace::category::busy, s.consume_name);
    return std::optional<element>{std::move(*e)};
  }
  return s.end(std::get<error>(std::move(got)));
}

element_stream::position element_stream::snapshot() {
  auto& s = *impl_;
  position out;
  if (s.finished) {
    out.chain.upstream_ended = true;
    if (s.status) out.chain.unsupported = "the stream had failed (" + s.status.message + ")";
    return out;
  }
  if (!s.snapshot_support.empty()) {
    out.chain.unsupported = s.snapshot_support;
    return out;
  }
  s.act.leave();
  caf::anon_send(s.sink, flow::snapshot_atom::value);
  for (;;) {
    auto got = s.pop();
    if (auto* e = std::get_if<element>(&got)) {
      out.read_ahead.push_back(std::move(*e));
    } else if (auto* mark = std::get_if<flow::snapshot_ptr>(&got)) {
      out.chain = std::move(**mark);
      return out;
    } else {
      // The stream ended before the mark came back (the sink answers pending requests first, so
      // only a reader that gave up on an earlier one gets here): what was read is all there is.
      auto ended = s.end(std::get<error>(std::move(got)));
      out.chain.upstream_ended = true;
      if (!ended) out.chain.unsupported = "the stream had failed (" + ended.error_value().message + ")";
      return out;
    }
  }
}

element_stream::iterator element_stream::begin() { return iterator{this}; }

const error& element_stream::status() const noexcept { return impl_->status; }

void element_stream::cancel() {
  auto& s = *impl_;
  s.act.leave();
  s.topo.shutdown();
  if (!s.finished) {
    s.finished = true;
    s.status = make_error(errc::cancelled, "the reader cancelled the stream");
  }
}

std::vector<stage_counters> element_stream::counters() const { return impl_->topo.counters(); }
void element_stream::set_slots(std::size_t stage, std::size_t slots) { impl_->topo.set_slots(stage, slots); }
void element_stream::set_parallelism(std::size_t stage, std::size_t workers) {
  impl_->topo.set_parallelism(stage, workers);
}

element_stream iterate(runtime& rt, const pipeline& p, sink_options options) {
  auto state = std::make_unique<element_stream::impl>(options.name, std::max<std::size_t>(1, options.slots));
  state->snapshot_support = p.snapshot_support();
  state->topo = detail::launch_with_sink(rt, p, options, state->queue, &state->sink);
  return element_stream{std::move(state)};
}

}  // namespace af
