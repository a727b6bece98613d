// Pipeline descriptions, launching them as topologies of stage actors, and the blocking reader.

#include "actors/stage.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>

#include "actors/runtime.hpp"
#include "actors/stage_actor.hpp"

namespace af {

using detail::stage_metrics;

// -- pipeline -----------------------------------------------------------------------------------

pipeline pipeline::from_generator(std::string name, generator_fn gen, stage_options options) {
  return from_source(std::move(name), [gen = std::move(gen)] { return gen; }, options);  // a copy per launch
}

pipeline pipeline::from_source(std::string name, generator_factory make, stage_options options) {
  stage_spec spec;
  spec.make_gen = std::move(make);
  return source_pipeline(std::move(spec), std::move(name), options);
}

pipeline pipeline::from_savable_source(std::string name, source_factory make, stage_options options) {
  stage_spec spec;
  spec.make_source = std::move(make);
  return source_pipeline(std::move(spec), std::move(name), options);
}

pipeline pipeline::source_pipeline(stage_spec spec, std::string name, stage_options options) {
  spec.what = stage_spec::kind::generator;
  spec.name = std::move(name);
  spec.options = options;
  pipeline p;
  p.stages_.push_back(std::make_shared<stage_spec>(std::move(spec)));
  return p;
}

pipeline pipeline::interleave(std::string name, child_opener_factory open, interleave_options interleave,
                              stage_options options) {
  child_inputs_factory inputs;
  if (open) inputs = [open = std::move(open)] { return child_inputs{.open = open()}; };
  return pipeline::interleave(std::move(name), std::move(inputs), std::move(interleave), options);
}

pipeline pipeline::interleave(std::string name, child_inputs_factory inputs, interleave_options interleave,
                              stage_options options) {
  auto spec = std::make_shared<stage_spec>();
  spec->what = stage_spec::kind::interleave;
  spec->name = std::move(name);
  spec->options = options;
  spec->make_inputs = std::move(inputs);
  spec->interleave = std::move(interleave);
  pipeline p;
  p.stages_.push_back(std::move(spec));
  return p;
}

pipeline pipeline::interleave(std::string name, pipeline outer, child_maker make, interleave_options interleave,
                              stage_options options) {
  auto spec = std::make_shared<stage_spec>();
  spec->what = stage_spec::kind::interleave;
  spec->name = std::move(name);
  spec->options = options;
  spec->outer = std::make_shared<const pipeline>(std::move(outer));
  spec->make_child = std::move(make);
  spec->interleave = std::move(interleave);
  pipeline p;
  p.stages_.push_back(std::move(spec));
  return p;
}

pipeline pipeline::from_actor(std::string name, caf::actor producer) {
  auto spec = std::make_shared<stage_spec>();
  spec->what = stage_spec::kind::actor;
  spec->name = std::move(name);
  spec->producer = std::move(producer);
  pipeline p;
  p.stages_.push_back(std::move(spec));
  return p;
}

namespace {

// A stateless function as an operator.
class function_operator final : public stage_operator {
 public:
  explicit function_operator(transform_fn fn) : fn_(std::move(fn)) {}
  expected<void> push(element input, std::vector<element>& out) override {
    auto made = fn_(std::move(input));
    if (!made) return made.error_value();
    for (auto& e : *made) out.push_back(std::move(e));
    return {};
  }
  bool save(stage_state&) const override { return true; }  // a function holds nothing between calls
  expected<void> restore(const stage_state&) override { return {}; }

 private:
  transform_fn fn_;
};

}  // namespace

pipeline pipeline::transform(std::string name, transform_fn fn, stage_options options) const {
  return apply(std::move(name), [fn = std::move(fn)] { return std::make_unique<function_operator>(fn); },
               options);
}

pipeline pipeline::apply(std::string name, operator_factory make, stage_options options) const {
  auto spec = std::make_shared<stage_spec>();
  spec->what = stage_spec::kind::transform;
  spec->name = std::move(name);
  spec->options = options;
  spec->make_op = std::move(make);
  pipeline p = *this;
  p.stages_.push_back(std::move(spec));
  return p;
}

pipeline pipeline::parallel_map(std::string name, transform_fn fn, parallel_options options) const {
  auto spec = std::make_shared<stage_spec>();
  spec->what = stage_spec::kind::parallel_map;
  spec->name = std::move(name);
  options.parallelism = std::max<std::size_t>(1, options.parallelism);
  if (options.slots == 0) options.slots = 2 * options.parallelism;
  spec->options.slots = options.slots;
  spec->options.detached = options.detached;
  spec->parallel = options;
  spec->fn = std::move(fn);
  pipeline p = *this;
  p.stages_.push_back(std::move(spec));
  return p;
}

std::string pipeline::snapshot_support() const {
  for (const auto& s : stages_) {
    if (s->what == stage_spec::kind::actor) return "stage '" + s->name + "' is an actor outside the pipeline";
    // An interleave's own inputs and children are checked when the snapshot is taken.
    if (s->what == stage_spec::kind::interleave && s->outer) {
      auto outer = s->outer->snapshot_support();
      if (!outer.empty()) return "the input of stage '" + s->name + "': " + outer;
    }
    if (s->what == stage_spec::kind::generator && !s->make_source)
      return "source '" + s->name + "' cannot save its position (a generator)";
  }
  return {};
}

expected<pipeline> pipeline::resumed(const chain_snapshot& snapshot) const {
  if (!snapshot.unsupported.empty())
    return make_error(errc::invalid_argument, "resume: the snapshot is incomplete: " + snapshot.unsupported);
  const std::size_t n = stages_.size(), saved = snapshot.stages.size();
  if (saved > n || (saved < n && !snapshot.upstream_ended))
    return make_error(errc::invalid_argument, "resume: the snapshot holds " + std::to_string(saved) +
                                                  " stage states for a pipeline of " + std::to_string(n) + " stages");
  pipeline out;
  for (std::size_t i = 0; i < n; ++i) {
    auto spec = std::make_shared<stage_spec>(*stages_[i]);
    if (i < n - saved) {
      spec->restore_ended = true;
    } else {
      const stage_state& state = snapshot.stages[i - (n - saved)];
      if (state.stage != spec->name)
        return make_error(errc::invalid_argument, "resume: stage " + std::to_string(i) + " is '" + spec->name +
                                                      "' but the snapshot saved '" + state.stage + "' there");
      spec->restore = std::make_shared<const stage_state>(state);
    }
    out.stages_.push_back(std::move(spec));
  }
  return out;
}

std::size_t pipeline::total_slots() const {
  std::size_t n = 0;
  for (const auto& s : stages_)
    if (s->what != stage_spec::kind::actor) n += std::max<std::size_t>(1, s->options.slots);
  for (const auto& s : stages_)  // each child an interleave keeps open holds its own slots
    if (s->what == stage_spec::kind::interleave) {
      n += s->interleave.child_slots * (std::max<std::size_t>(1, s->interleave.cycle_length) + s->interleave.open_ahead);
      if (s->outer) n += s->outer->total_slots();
    }
  return n;
}

std::string pipeline::to_dot() const {
  std::string out = "digraph pipeline {\n  rankdir=LR;\n";
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    const auto& s = *stages_[i];
    out += "  s" + std::to_string(i) + " [label=\"" + s.name;
    if (s.what == stage_spec::kind::parallel_map)
      out += "\\nworkers " + std::to_string(s.parallel.parallelism) +
             (s.parallel.deterministic ? ", ordered" : ", unordered");
    if (s.what == stage_spec::kind::interleave)
      out += "\\ncycle " + std::to_string(s.interleave.cycle_length) + ", block " + std::to_string(s.interleave.block_length);
    if (s.what != stage_spec::kind::actor) out += "\\nslots " + std::to_string(s.options.slots);
    out += "\"];\n";
    if (i > 0) out += "  s" + std::to_string(i - 1) + " -> s" + std::to_string(i) + ";\n";
  }
  return out + "}\n";
}

// -- topology -----------------------------------------------------------------------------------

struct topology::impl {
  caf::actor_system* sys = nullptr;
  std::vector<caf::actor> owned;  // stage actors we spawned (not an external source)
  caf::actor tail;
  std::vector<std::shared_ptr<stage_metrics>> metrics;
  std::vector<caf::actor> stage_actors;  // parallel to metrics
  caf::actor sink;  // when launched with one
  bool down = false;
};

topology::topology() = default;
topology::topology(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
topology::topology(topology&&) noexcept = default;
topology& topology::operator=(topology&& other) noexcept {
  if (this != &other) {
    shutdown();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
topology::~topology() { shutdown(); }

caf::actor topology::tail() const { return impl_ ? impl_->tail : caf::actor{}; }

std::vector<stage_counters> topology::counters() const {
  std::vector<stage_counters> out;
  if (impl_)
    for (const auto& m : impl_->metrics) out.push_back(m->snapshot());
  return out;
}

std::size_t topology::stage_count() const { return impl_ ? impl_->metrics.size() : 0; }

// The tuning calls read only what launch wrote (never `down`): an autotuner thread may call them
// while the reader thread shuts the topology down; a message to a finished stage is dropped.
void topology::set_slots(std::size_t stage, std::size_t slots) {
  if (!impl_ || stage >= impl_->stage_actors.size()) return;
  caf::anon_send(impl_->stage_actors[stage], detail::tune_atom::value,
                 static_cast<uint64_t>(std::max<std::size_t>(1, slots)), uint64_t{0});
}

void topology::set_parallelism(std::size_t stage, std::size_t workers) {
  if (!impl_ || stage >= impl_->stage_actors.size()) return;
  caf::anon_send(impl_->stage_actors[stage], detail::tune_atom::value, uint64_t{0},
                 static_cast<uint64_t>(std::max<std::size_t>(1, workers)));
}

void topology::resume_delivery() {
  if (impl_ && impl_->sink) caf::anon_send(impl_->sink, detail::resume_atom::value);
}

void topology::request_snapshot() {
  if (impl_ && impl_->sink) caf::anon_send(impl_->sink, flow::snapshot_atom::value);
}

void topology::shutdown() {
  if (!impl_ || impl_->down) return;
  impl_->down = true;
  if (impl_->owned.empty()) return;
  caf::scoped_actor self{*impl_->sys};
  for (const auto& a : impl_->owned) self->monitor(a);
  // Cancel every stage directly rather than only the tail: a stage busy in a long function then
  // does not delay the others' shutdown. A stage that already finished yields its down at once.
  // Downstream first: each stage's cancel is then in its mailbox before its upstream can quit, so
  // it reports the cancel rather than "upstream terminated without end".
  for (auto a = impl_->owned.rbegin(); a != impl_->owned.rend(); ++a) self->send(*a, flow::cancel_atom::value);
  for (std::size_t i = 0; i < impl_->owned.size(); ++i) {
    bool timed_out = false;
    self->receive([](const caf::down_msg&) {},
                  caf::after(std::chrono::seconds(60)) >> [&] { timed_out = true; });
    if (timed_out) {
      // A user function that never returns: report it rather than hang silently.
      std::fprintf(stderr, "actorflow: a pipeline stage did not stop within 60 s of cancel\n");
      break;
    }
  }
}

namespace {

std::unique_ptr<topology::impl> spawn_stages(runtime& rt, const pipeline& p) {
  AF_ASSERT(!p.stages().empty());  // a pipeline starts with from_generator or from_actor
  auto state = std::make_unique<topology::impl>();
  state->sys = &rt.system();
  caf::actor prev;
  for (const auto& spec : p.stages()) {
    if (spec->what == stage_spec::kind::actor) {
      prev = spec->producer;  // external: we neither own nor count it
      continue;
    }
    auto metrics = std::make_shared<stage_metrics>(spec->name);
    prev = detail::spawn_stage(rt.system(), *spec, prev, metrics);
    state->owned.push_back(prev);
    state->metrics.push_back(std::move(metrics));
    state->stage_actors.push_back(prev);
  }
  state->tail = prev;
  return state;
}

// Hands each element to a callback, which may pause the delivery: what arrives meanwhile waits
// here (its credit stays with the sink) until resume(). Elements handed in first wait paused
// until the sink starts the delivery.
class callback_target final : public detail::sink_target {
 public:
  explicit callback_target(pausable_delivery d)
      : on_element_(std::move(d.on_element)), on_done_(std::move(d.on_done)), on_mark_(std::move(d.on_mark)),
        waiting_(std::make_move_iterator(d.first.begin()), std::make_move_iterator(d.first.end())),
        paused_(!waiting_.empty()) {}
  expected<void> deliver(std::vector<element>&& batch) override {
    for (auto& e : batch) waiting_.push_back(std::move(e));
    return drain();
  }
  void done(const error& status) override {
    if (on_done_) on_done_(status);
  }
  void mark(flow::snapshot_ptr mark) override {
    if (!on_mark_) return;
    on_mark_(std::move(*mark), std::vector<element>(waiting_.begin(), waiting_.end()));
  }
  bool releases_on_delivery() const noexcept override { return true; }
  std::size_t holding() const noexcept override { return waiting_.size(); }
  bool paused() const noexcept override { return paused_; }
  expected<void> resume() override {
    paused_ = false;
    return drain();
  }

 private:
  expected<void> drain() {
    while (!paused_ && !waiting_.empty()) {
      auto verdict = guarded("element handler", [&] { return on_element_(std::move(waiting_.front())); });
      if (!verdict) return verdict.error_value();
      if (*verdict == delivery::hold) {
        paused_ = true;  // the element stays first in line
        break;
      }
      waiting_.pop_front();
      paused_ = *verdict == delivery::pause;
    }
    return {};
  }

  pausable_handler on_element_;
  done_handler on_done_;
  mark_handler on_mark_;
  std::deque<element> waiting_;
  bool paused_ = false;
};

}  // namespace

topology launch(runtime& rt, const pipeline& p) { return topology{spawn_stages(rt, p)}; }

namespace detail {

caf::actor spawn_stage(caf::actor_system& sys, const stage_spec& spec, caf::actor upstream,
                       std::shared_ptr<stage_metrics> metrics) {
  switch (spec.what) {
    case stage_spec::kind::generator: return spawn_source(sys, spec, std::move(metrics));
    case stage_spec::kind::interleave: return spawn_interleave(sys, spec, std::move(metrics));
    case stage_spec::kind::transform: return spawn_transform(sys, spec, std::move(upstream), std::move(metrics));
    case stage_spec::kind::parallel_map: return spawn_parallel_map(sys, spec, std::move(upstream), std::move(metrics));
    case stage_spec::kind::actor: return spec.producer;
  }
  return {};
}

caf::actor spawn_chain(caf::actor_system& sys, const pipeline& p, const std::shared_ptr<stage_metrics>& shared) {
  caf::actor prev;
  for (const auto& spec : p.stages()) {
    if (spec->what == stage_spec::kind::generator) {
      stage_spec source = *spec;
      source.adds_to_shared_metrics = true;
      prev = spawn_source(sys, source, shared);
    } else {
      prev = spawn_stage(sys, *spec, prev, std::make_shared<stage_metrics>(spec->name));
    }
  }
  return prev;
}

topology launch_with_sink(runtime& rt, const pipeline& p, const sink_options& options,
                          std::shared_ptr<sink_target> target, caf::actor* sink) {
  auto state = spawn_stages(rt, p);
  auto metrics = std::make_shared<stage_metrics>(options.name);
  auto handle = detail::spawn_sink(rt.system(), options.name, options.slots, state->tail,
                                   std::move(target), metrics);
  if (sink) *sink = handle;
  state->sink = handle;
  state->owned.push_back(handle);
  state->stage_actors.push_back(std::move(handle));
  state->metrics.push_back(std::move(metrics));
  return topology{std::move(state)};
}

}  // namespace detail

topology launch(runtime& rt, const pipeline& p, sink_options options, element_handler on_element,
                done_handler on_done) {
  pausable_handler always_more = [on_element = std::move(on_element)](element&& e) -> expected<delivery> {
    AF_TRY(on_element(std::move(e)));
    return delivery::more;
  };
  return launch_pausable(rt, p, std::move(options), {.on_element = std::move(always_more), .on_done = std::move(on_done)});
}

topology launch_pausable(runtime& rt, const pipeline& p, sink_options options, pausable_delivery delivery) {
  return detail::launch_with_sink(rt, p, options, std::make_shared<callback_target>(std::move(delivery)));
}

}  // namespace af
