#include "ops/passes/memory_plan.hpp"

#include <algorithm>
#include <string>

namespace af::graph {

expected<memory_plan> plan_memory(const graph& g) {
  const auto& nodes = g.nodes();
  const std::size_t n = nodes.size();
  memory_plan plan;
  plan.buffer_of.assign(n, -1);
  // A view's readers keep the viewed buffer alive: resolve each node to the node owning its memory.
  std::vector<std::size_t> owner(n);
  for (std::size_t i = 0; i < n; ++i) {
    const op_def* info = find_op(nodes[i].op);
    owner[i] = info && info->category == op_category::movement ? owner[static_cast<std::size_t>(nodes[i].inputs[0])] : i;
  }
  std::vector<std::size_t> last_use(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    last_use[i] = std::max(last_use[i], i);
    for (auto in : nodes[i].inputs) {
      auto& last = last_use[owner[static_cast<std::size_t>(in)]];
      last = std::max(last, i);
    }
  }
  for (auto out : g.outputs()) last_use[owner[static_cast<std::size_t>(out)]] = n;  // lives past the run

  std::vector<std::size_t> free_buffers;
  std::vector<std::vector<int>> release_at(n + 1);
  for (std::size_t i = 0; i < n; ++i) {
    for (int b : release_at[i]) free_buffers.push_back(static_cast<std::size_t>(b));
    const node& x = nodes[i];
    const op_def* info = find_op(x.op);
    const bool owns_memory = x.kind != node_kind::parameter && x.kind != node_kind::constant && !(info && info->category == op_category::movement);
    if (!owns_memory) continue;
    if (std::any_of(x.out.dims.begin(), x.out.dims.end(), [](int64_t d) { return d < 0; }))
      return make_error(errc::unsupported, "memory plan: node " + std::to_string(i) + " (" + x.op + ") has unknown size " +
                                               to_string(x.out));
    const std::size_t bytes = static_cast<std::size_t>(numel(x.out.dims)) * size_of(x.out.type);
    plan.unshared_bytes += bytes;
    auto best = free_buffers.end();
    for (auto it = free_buffers.begin(); it != free_buffers.end(); ++it)
      if (plan.buffer_bytes[*it] >= bytes && (best == free_buffers.end() || plan.buffer_bytes[*it] < plan.buffer_bytes[*best]))
        best = it;
    int buffer;
    if (best != free_buffers.end()) {
      buffer = static_cast<int>(*best);
      free_buffers.erase(best);
    } else {
      buffer = static_cast<int>(plan.buffer_bytes.size());
      plan.buffer_bytes.push_back(bytes);
    }
    plan.buffer_of[i] = buffer;
    // Free after its last reader ran (from the next node on); a value nobody reads frees at once.
    release_at[std::min(last_use[i] + 1, n)].push_back(buffer);
  }
  for (auto bytes : plan.buffer_bytes) plan.planned_bytes += bytes;
  return plan;
}

}  // namespace af::graph
