// The CPU kernel table (ops/op_registry.hpp) made from the op definitions: what device actors and
// the graph interpreter call by name.

#include "ops/graph/defs/families.hpp"
#include "ops/op_registry.hpp"

namespace af {

void register_cpu_kernels(op_registry& registry) {
  for (const graph::op_def* def : graph::all_ops()) {
    if (!def->cpu_kernel) continue;
    registry.add(def->name, [def](const std::vector<tensor>& in, const op_attrs& attrs) -> expected<std::vector<tensor>> {
      AF_TRY(graph::defs::arity(*def, in));
      AF_TRY_ASSIGN(auto complete, graph::complete_attrs(*def, attrs));
      return def->cpu_kernel(in, complete);
    });
  }
}

std::shared_ptr<const op_registry> default_op_registry() {
  static const std::shared_ptr<const op_registry> shared = [] {
    auto r = std::make_shared<op_registry>();
    register_cpu_kernels(*r);
    return r;
  }();
  return shared;
}

}  // namespace af
