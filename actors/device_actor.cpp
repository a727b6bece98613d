// The CPU device actor. Kernels run inside the handler, so requests are served one at a time in
// mailbox order; outputs are placed in the device's allocator, whose limit therefore bounds them.

#include "actors/device_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/result.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/caf_error.hpp"
#include "actors/tracing.hpp"

namespace af {

namespace {

// -- state --------------------------------------------------------------------------------------

struct device_state {
  std::string name;
  std::shared_ptr<allocator> memory;
  std::shared_ptr<const op_registry> ops;
  std::unique_ptr<trace::activity> act;
};

// -- behaviour ----------------------------------------------------------------------------------

// Kernels allocate from the process-wide CPU allocator (ops/ has no per-call allocator yet), so an
// output that is not already ours is copied into device memory.
expected<void> place_outputs(device_state& st, const std::string& op, std::vector<tensor>& outputs) {
  for (auto& t : outputs) {
    if (!t.defined()) continue;
    auto placed = tensor::empty(t.shape(), t.type(), st.memory);
    if (!placed)
      return make_error(placed.error_value().code,
                        op + " on " + st.name + ": " + placed.error_value().message);
    AF_TRY(copy_into(t, *placed));
    t = std::move(*placed);
  }
  return {};
}

device_actor::behavior_type cpu_device(device_actor::stateful_pointer<device_state> self,
                                       std::string name, std::shared_ptr<allocator> memory,
                                       std::shared_ptr<const op_registry> ops) {
  auto& st = self->state;
  st.act = std::make_unique<trace::activity>(name);
  st.name = std::move(name);
  st.memory = std::move(memory);
  st.ops = std::move(ops);
  return {
      [self](exec_atom, const std::string& op, const std::vector<tensor>& inputs,
             const op_attrs& attrs) -> caf::result<std::vector<tensor>> {
        auto& s = self->state;
        const int64_t start = trace::now_ns();
        auto outputs = s.ops->run(op, inputs, attrs);
        if (outputs) {
          if (auto placed = place_outputs(s, op, *outputs); !placed) outputs = placed.error_value();
        }
        s.act->busy_since(start, trace::intern(op), 1);
        if (!outputs) return to_caf_error(outputs.error_value());
        return std::move(*outputs);
      },
      [self](stats_atom) -> allocator_stats { return self->state.memory->stats(); },
  };
}

}  // namespace

expected<device_actor> spawn_cpu_device(caf::actor_system& sys, device_options options) {
  options.memory.name = options.name;
  auto memory = make_cpu_allocator(options.memory);
  if (!memory) return memory.error_value();
  auto ops = options.ops ? options.ops : default_op_registry();
  return sys.spawn(cpu_device, options.name, std::move(*memory), std::move(ops));
}

void register_device_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<op_attrs>("af.op_attrs");
  cfg.add_message_type<allocator_stats>("af.allocator_stats");
}

}  // namespace af
