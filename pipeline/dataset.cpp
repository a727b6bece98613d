// Running a dataset description: building its stages, the blocking iterator, to_dot().

#include "pipeline/dataset.hpp"

#include "actors/tracing.hpp"
#include "pipeline/autotune.hpp"
#include "pipeline/iterator.hpp"
#include "pipeline/node.hpp"

namespace af::data {

build_context top_level_context(runtime& rt, uint64_t base_seed) {
  build_context ctx;
  ctx.rt = &rt;
  ctx.state = std::make_shared<iteration_state>();
  ctx.state->base_seed = base_seed;
  ctx.tunables = std::make_shared<tunable_registry>();
  return ctx;
}

expected<void> check_resumable(const dataset& ds, const iterator_state& saved) {
  if (saved.fingerprint != ds.to_dot())
    return make_error(errc::invalid_argument,
                      "resume: the saved iterator state belongs to another pipeline (its description differs)");
  return {};
}

dataset positioned_at(const dataset& ds, uint64_t consumed) {
  // Replays the pipeline and drops what the saved iterator had handed out, inside the topology.
  return consumed == 0 ? ds : ds.skip(static_cast<int64_t>(consumed));
}

expected<pipeline> resumed_stages(const dataset& ds, const iterator_state& saved, const build_context& ctx) {
  AF_TRY(check_resumable(ds, saved));
  if (!saved.stages) return positioned_at(ds, saved.consumed).root()->build(ctx);
  return ds.root()->build(ctx).resumed(*saved.stages);
}

namespace {

iterator launch_iteration(runtime& rt, const pipeline& stages, const build_context& ctx, std::string fingerprint,
                          uint64_t consumed, std::vector<element> pending, const autotune_options& tuning) {
  auto stream = af::iterate(rt, stages, {.slots = 4, .name = "iterator"});
  iterator it{std::move(stream), ctx.state, std::move(fingerprint), consumed, std::move(pending)};
  std::vector<tunable_stage> knobs;
  {
    std::lock_guard<std::mutex> guard{ctx.tunables->mtx};
    knobs = ctx.tunables->stages;
  }
  if (!knobs.empty()) it.attach_tuner(std::move(knobs), tuning);
  return it;
}

}  // namespace

pipeline dataset::to_pipeline(runtime& rt) const {
  auto ctx = top_level_context(rt, random_seed());
  ctx.tunables = nullptr;  // no tuner watches a pipeline launched by hand
  return root_->build(ctx);
}

iterator dataset::iterate(runtime& rt, autotune_options tuning) const {
  auto ctx = top_level_context(rt, random_seed());
  return launch_iteration(rt, root_->build(ctx), ctx, to_dot(), 0, {}, tuning);
}

expected<iterator> dataset::resume(runtime& rt, const iterator_state& saved, autotune_options tuning) const {
  auto ctx = top_level_context(rt, saved.base_seed);
  AF_TRY_ASSIGN(auto stages, resumed_stages(*this, saved, ctx));
  return launch_iteration(rt, stages, ctx, to_dot(), saved.consumed, saved.stages ? saved.pending : std::vector<element>{},
                          tuning);
}

namespace {

// Emits `n` and its inputs (depth first); returns n's id.
std::size_t emit_dot(const node& n, std::string& out, std::size_t& next_id) {
  std::vector<std::size_t> ups;
  for (const node* in : n.inputs()) ups.push_back(emit_dot(*in, out, next_id));
  const std::size_t id = next_id++;
  std::string label;
  for (char c : n.label()) label += c == '"' ? std::string{"\\\""} : std::string(1, c);
  out += "  n" + std::to_string(id) + " [label=\"" + label + "\"];\n";
  for (std::size_t up : ups) out += "  n" + std::to_string(up) + " -> n" + std::to_string(id) + ";\n";
  return id;
}

}  // namespace

std::string dataset::to_dot() const {
  std::string out = "digraph dataset {\n  rankdir=LR;\n  node [shape=box];\n";
  std::size_t next_id = 0;
  emit_dot(*root_, out, next_id);
  return out + "}\n";
}

iterator::iterator(element_stream stream, std::shared_ptr<iteration_state> state, std::string fingerprint,
                   uint64_t already_consumed, std::vector<element> pending)
    : stream_(std::make_unique<element_stream>(std::move(stream))), state_(std::move(state)), fingerprint_(std::move(fingerprint)),
      consumed_(already_consumed), pending_(std::make_move_iterator(pending.begin()), std::make_move_iterator(pending.end())),
      signals_(std::make_shared<consumer_signals>()) {}
iterator::iterator(iterator&&) noexcept = default;
iterator& iterator::operator=(iterator&&) noexcept = default;
iterator::~iterator() = default;

expected<std::optional<element>> iterator::next() {
  if (!pending_.empty()) {
    element e = std::move(pending_.front());
    pending_.pop_front();
    ++consumed_;
    return std::optional<element>{std::move(e)};
  }
  const int64_t start = trace::now_ns();
  auto got = stream_->next();
  signals_->waited_ns.fetch_add(trace::now_ns() - start, std::memory_order_relaxed);
  if (got && got->has_value()) {
    ++consumed_;
    signals_->element_bytes.store((*got)->nbytes(), std::memory_order_relaxed);
  }
  return got;
}

iterator::range_iterator iterator::begin() { return range_iterator{this}; }

int64_t iterator::waited_ns() const noexcept { return signals_->waited_ns.load(std::memory_order_relaxed); }

void iterator::attach_tuner(std::vector<tunable_stage> knobs, autotune_options options) {
  element_stream* stream = stream_.get();
  tuning_target target{[stream] { return stream->counters(); },
                       [stream](std::size_t stage, std::size_t slots) { stream->set_slots(stage, slots); },
                       [stream](std::size_t stage, std::size_t workers) { stream->set_parallelism(stage, workers); }};
  tuner_ = std::make_unique<autotuner>(std::move(target), std::move(knobs), options, signals_);
}

iteration_stats iterator::stats() const {
  iteration_stats out;
  out.skipped_errors = state_->skipped.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard{state_->mtx};
  out.first_skipped_error = state_->first_skipped;
  return out;
}

iterator_state iterator::save() {
  auto at = stream_->snapshot();
  for (auto& e : at.read_ahead) pending_.push_back(std::move(e));
  iterator_state out{state_->base_seed, consumed_, fingerprint_, std::nullopt, {}, {}};
  if (at.chain.unsupported.empty()) {
    out.stages = std::move(at.chain);
    out.pending.assign(pending_.begin(), pending_.end());
  } else {
    out.replay_reason = std::move(at.chain.unsupported);
  }
  return out;
}

}  // namespace af::data
