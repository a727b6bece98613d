// The device actor. Kernels run inside the handler through the device's backend, so requests are
// served one at a time in mailbox order; a CPU backend runs them inside an allocator_scope of its
// allocator, so outputs and temporaries are placed there directly and its limit bounds them.

#include "actors/device_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/result.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/caf_error.hpp"
#include "actors/resume_ordered.hpp"
#include "actors/tracing.hpp"
#include "ops/runtime/backend.hpp"

namespace af {

namespace {

// -- state --------------------------------------------------------------------------------------

struct device_state {
  std::shared_ptr<backend> device;
  std::unique_ptr<trace::activity> act;
};

// -- behaviour ----------------------------------------------------------------------------------

// "matmul: ..." becomes "matmul on cpu:0: ...": the requester learns which device refused.
error on_device(const std::string& device, const std::string& op, error err) {
  const std::string prefix = op + ": ";
  std::string rest = err.message.rfind(prefix, 0) == 0 ? err.message.substr(prefix.size()) : err.message;
  err.message = op + " on " + device + ": " + rest;
  return err;
}

using device_actor_impl = detail::resume_ordered<caf::stateful_actor<device_state, device_actor::base>>;

device_actor::behavior_type device_behavior(device_actor_impl* self, std::shared_ptr<backend> device) {
  auto& st = self->state;
  st.act = std::make_unique<trace::activity>(device->properties().name);
  st.device = std::move(device);
  return {
      [self](exec_atom, const std::string& op, const std::vector<tensor>& inputs,
             const op_attrs& attrs) -> caf::result<std::vector<tensor>> {
        auto& s = self->state;
        const int64_t start = trace::now_ns();
        auto outputs = s.device->run(op, inputs, attrs);
        s.act->busy_since(start, trace::intern(op), 1);
        if (!outputs) return to_caf_error(on_device(s.device->properties().name, op, std::move(outputs).error_value()));
        return std::move(*outputs);
      },
      [self](stats_atom) -> allocator_stats { return self->state.device->memory()->stats(); },
  };
}

}  // namespace

expected<device_actor> spawn_cpu_device(caf::actor_system& sys, device_options options) {
  options.memory.name = options.name;
  auto memory = make_cpu_allocator(options.memory);
  if (!memory) return memory.error_value();
  return spawn_device(sys, make_cpu_backend({options.name, std::move(*memory), std::move(options.ops)}));
}

device_actor spawn_device(caf::actor_system& sys, std::shared_ptr<backend> device) {
  return sys.spawn(device_behavior, std::move(device));
}

void register_device_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<op_attrs>("af.op_attrs");
  cfg.add_message_type<allocator_stats>("af.allocator_stats");
}

}  // namespace af
