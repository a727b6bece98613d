// Running a dataset description: building its stages, the blocking iterator, to_dot().

#include "pipeline/dataset.hpp"

#include "pipeline/iterator.hpp"
#include "pipeline/node.hpp"

namespace af::data {

pipeline dataset::to_pipeline(runtime& rt) const {
  build_context ctx;
  ctx.rt = &rt;
  ctx.state = std::make_shared<iteration_state>();
  return root_->build(ctx);
}

iterator dataset::iterate(runtime& rt) const {
  build_context ctx;
  ctx.rt = &rt;
  ctx.state = std::make_shared<iteration_state>();
  auto stream = af::iterate(rt, root_->build(ctx), {.slots = 4, .name = "iterator"});
  return iterator{std::move(stream), ctx.state};
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

iterator::iterator(element_stream stream, std::shared_ptr<iteration_state> state)
    : stream_(std::move(stream)), state_(std::move(state)) {}
iterator::iterator(iterator&&) noexcept = default;
iterator& iterator::operator=(iterator&&) noexcept = default;
iterator::~iterator() = default;

expected<std::optional<element>> iterator::next() { return stream_.next(); }

iteration_stats iterator::stats() const {
  iteration_stats out;
  out.skipped_errors = state_->skipped.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard{state_->mtx};
  out.first_skipped_error = state_->first_skipped;
  return out;
}

}  // namespace af::data
