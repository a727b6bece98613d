// The CPU device actor. Kernels run inside the handler, so requests are served one at a time in
// mailbox order. Kernels run inside an allocator_scope of the device's allocator, so outputs and
// temporaries are placed there directly and its limit bounds them.

#include "actors/device_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/result.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/caf_error.hpp"
#include "actors/resume_ordered.hpp"
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

// "matmul: ..." becomes "matmul on cpu:0: ...": the requester learns which device refused.
error on_device(const std::string& device, const std::string& op, error err) {
  const std::string prefix = op + ": ";
  std::string rest = err.message.rfind(prefix, 0) == 0 ? err.message.substr(prefix.size()) : err.message;
  err.message = op + " on " + device + ": " + rest;
  return err;
}

using cpu_device_actor = detail::resume_ordered<caf::stateful_actor<device_state, device_actor::base>>;

device_actor::behavior_type cpu_device(cpu_device_actor* self,
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
        auto outputs = [&] {
          allocator_scope on_device{s.memory};
          return s.ops->run(op, inputs, attrs);
        }();
        s.act->busy_since(start, trace::intern(op), 1);
        if (!outputs) return to_caf_error(on_device(s.name, op, std::move(outputs).error_value()));
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
