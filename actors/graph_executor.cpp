#include "actors/graph_executor.hpp"

#include <caf/actor_system.hpp>
#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <algorithm>
#include <climits>
#include <optional>
#include <string>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"
#include "actors/resume_ordered.hpp"
#include "actors/runtime.hpp"
#include "actors/tracing.hpp"
#include "actors/tsan_handoff.hpp"
#include <ostream>

#include "ops/allocator.hpp"
#include "ops/op_registry.hpp"
#include "ops/passes/placement.hpp"
#include "ops/runtime/backend.hpp"
#include "ops/runtime/interpreter.hpp"

namespace af {

namespace {

/// Caller or producer -> node actor: (step, input slot, value).
using gx_input_atom = caf::atom_constant<caf::atom("gx_input")>;
/// Node actor -> caller: (step, output index, value) or (step, error).
using gx_output_atom = caf::atom_constant<caf::atom("gx_output")>;
using gx_failed_atom = caf::atom_constant<caf::atom("gx_failed")>;

// The slot of the message that starts a node with no inputs arriving (random ops, say).
constexpr uint32_t start_slot = UINT32_MAX;

struct reader {
  caf::actor who;
  uint32_t slot;
};

// What one node actor computes and where its result goes; fixed once launched.
struct node_plan {
  graph::node op;
  std::shared_ptr<const graph::fused_program> program;  // a fused node's
  std::vector<tensor> fixed;                             // constant inputs by slot (undefined: arrives per step)
  uint32_t arriving = 0;                                 // inputs that arrive per step
  std::vector<reader> readers;
  std::vector<uint32_t> graph_outputs;  // indices of the graph's outputs this node is
  caf::actor caller;
  std::string where;  // "node 7 (matmul, model.cpp:12) on cpu:0"
  std::string activity;  // "cpu:0/matmul#7": the row of its spans in a trace
  std::shared_ptr<backend> device;
};

struct node_state {
  std::shared_ptr<node_plan> plan;
  uint64_t step = 0;
  std::vector<tensor> inputs;
  uint32_t received = 0;
  std::unique_ptr<trace::activity> act;
  trace::name_id op_name = 0;
};

using node_actor = detail::resume_ordered<caf::stateful_actor<node_state>>;

expected<tensor> compute(const node_plan& p, const std::vector<tensor>& inputs) {
  AF_TRY_ASSIGN(auto made, p.device->run_node(p.op, p.program.get(), inputs));
  // The caller reads outputs in host memory.
  if (!p.graph_outputs.empty() && !p.device->properties().host_memory) return p.device->to_host(made);
  return made;
}

caf::behavior node_behavior(node_actor* self, std::shared_ptr<node_plan> plan) {
  self->state.act = std::make_unique<trace::activity>(plan->activity);
  self->state.op_name = trace::intern(plan->op.op);
  self->state.plan = std::move(plan);
  return {
      [self](gx_input_atom, uint64_t step, uint32_t slot, tensor& value) {
        auto& st = self->state;
        const auto& p = *st.plan;
        if (value.defined()) detail::tsan_acquire_payload(value);
        if (step < st.step) return;  // a step abandoned after an error
        if (step > st.step || st.inputs.empty()) {
          st.step = step;
          st.inputs = p.fixed;
          st.received = 0;
        }
        if (slot != start_slot) {
          st.inputs[slot] = std::move(value);
          ++st.received;
        }
        if (st.received < p.arriving) return;
        const int64_t start = trace::now_ns();
        auto made = compute(p, st.inputs);
        st.act->busy_since(start, st.op_name, 1);
        st.inputs.clear();
        if (!made) {
          self->send(p.caller, gx_failed_atom::value, step,
                     to_caf_error(with_context(made.error_value(), p.where)));
          return;
        }
        detail::tsan_release_payload(*made);
        for (const auto& r : p.readers) self->send(r.who, gx_input_atom::value, step, r.slot, *made);
        for (auto index : p.graph_outputs) self->send(p.caller, gx_output_atom::value, step, index, *made);
      },
  };
}

}  // namespace

struct graph_executor::impl {
  explicit impl(caf::actor_system& sys) : caller(sys) {}
  graph::graph g;
  caf::scoped_actor caller;
  std::vector<caf::actor> actors;
  // Per parameter: who reads it. Per output: a value known without running (parameter or constant).
  std::vector<std::vector<reader>> parameter_readers;
  std::vector<std::optional<std::size_t>> output_parameter;
  std::vector<tensor> output_constant;
  std::vector<caf::actor> starters;  // nodes with no inputs arriving: told when each step starts
  std::size_t computed_outputs = 0;
  uint64_t step = 0;
};

graph_executor::graph_executor(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
graph_executor::graph_executor(graph_executor&&) noexcept = default;
graph_executor& graph_executor::operator=(graph_executor&&) noexcept = default;

graph_executor::~graph_executor() {
  if (!impl_) return;
  for (auto& a : impl_->actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

std::size_t graph_executor::actor_count() const noexcept { return impl_ ? impl_->actors.size() : 0; }

namespace {

// The options' devices with defaults filled in (a CPU backend for each without its own); "cpu:0"
// when none are given.
expected<std::vector<executor_device>> devices_of(executor_options options) {
  auto devices = std::move(options.devices);
  if (devices.empty()) devices.emplace_back();
  for (std::size_t i = 0; i < devices.size(); ++i) {
    auto& d = devices[i];
    if (d.name.empty()) return make_error(errc::invalid_argument, "graph executor: device " + std::to_string(i) + " has no name");
    for (std::size_t j = 0; j < i; ++j)
      if (devices[j].name == d.name)
        return make_error(errc::invalid_argument, "graph executor: device '" + d.name + "' is listed twice");
    if (!d.memory) d.memory = cpu_allocator();
    if (!d.ops) d.ops = default_op_registry();
    if (!d.device) d.device = make_cpu_backend({d.name, d.memory, d.ops});
  }
  return devices;
}

const executor_device* device_named(const std::vector<executor_device>& devices, const std::string& name) {
  if (name.empty()) return &devices.front();
  auto named = std::find_if(devices.begin(), devices.end(), [&](const executor_device& d) { return d.name == name; });
  return named == devices.end() ? nullptr : &*named;
}

// Copies where a value moves between devices that do not both keep tensors in host memory.
graph::graph with_copies(const graph::graph& g, const std::vector<executor_device>& devices) {
  return graph::insert_copies(g, [&](const std::string& from, const std::string& to) {
    const executor_device* a = device_named(devices, from);
    const executor_device* b = device_named(devices, to);
    if (!a || !b || a == b) return false;  // an unknown device fails the launch below
    return !(a->device->properties().host_memory && b->device->properties().host_memory);
  });
}

std::string device_names(const std::vector<executor_device>& devices) {
  std::string out;
  for (const auto& d : devices) out += (out.empty() ? "" : ", ") + d.name;
  return out;
}

}  // namespace

expected<graph_executor> graph_executor::launch(runtime& rt, graph::graph placed, executor_options options) {
  AF_TRY(placed.verify());
  std::ostream* placement_log = options.log_device_placement;
  AF_TRY_ASSIGN(const auto devices, devices_of(std::move(options)));
  graph::graph g = with_copies(placed, devices);
  auto state = std::make_unique<impl>(rt.system());
  const auto& nodes = g.nodes();
  const caf::actor caller = caf::actor_cast<caf::actor>(state->caller);
  // Plans first (readers need the actors of later nodes), then actors from the last node back.
  std::vector<std::shared_ptr<node_plan>> plans(nodes.size());
  std::vector<caf::actor> actor_of(nodes.size());
  std::vector<std::size_t> parameter_index(nodes.size(), 0);
  for (std::size_t k = 0; k < g.parameters().size(); ++k) parameter_index[static_cast<std::size_t>(g.parameters()[k])] = k;
  state->parameter_readers.resize(g.parameters().size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    if (n.kind == graph::node_kind::parameter || n.kind == graph::node_kind::constant) continue;
    auto p = std::make_shared<node_plan>();
    p->op = n;
    if (n.kind == graph::node_kind::fused) p->program = g.shared_program(static_cast<graph::node_id>(i));
    p->fixed.resize(n.inputs.size());
    p->caller = caller;
    const std::string node_name = "node " + std::to_string(i) + " (" + n.op + (n.label.empty() ? "" : ", " + n.label) + ")";
    const executor_device* device = device_named(devices, n.device);
    if (!device)
      return make_error(errc::invalid_argument, node_name + " is placed on '" + n.device +
                                                    "', but the executor's devices are " + device_names(devices));
    if (!device->device->supports(*graph::find_op(n.op)))
      return make_error(errc::unsupported, node_name + " is placed on '" + device->name + "', which has no kernel for it");
    for (std::size_t s = 0; s < n.inputs.size(); ++s) {
      const auto in = n.inputs[s];
      if (nodes[static_cast<std::size_t>(in)].kind != graph::node_kind::constant) {
        ++p->arriving;
        continue;
      }
      auto uploaded = device->device->from_host(g.constant_value(in));  // once, not per step
      if (!uploaded)
        return with_context(uploaded.error_value(), node_name + ": its constant input " + std::to_string(s) + " on " + device->name);
      p->fixed[s] = std::move(*uploaded);
    }
    if (placement_log) *placement_log << node_name << ": " << device->name << '\n';
    p->where = node_name + " on " + device->name;
    p->activity = device->name + "/" + n.op + "#" + std::to_string(i);
    p->device = device->device;
    plans[i] = std::move(p);
  }
  for (std::size_t o = 0; o < g.outputs().size(); ++o) {
    const auto id = static_cast<std::size_t>(g.outputs()[o]);
    state->output_parameter.emplace_back(std::nullopt);
    state->output_constant.emplace_back();
    if (nodes[id].kind == graph::node_kind::parameter) state->output_parameter.back() = parameter_index[id];
    else if (nodes[id].kind == graph::node_kind::constant) state->output_constant.back() = g.constant_value(static_cast<graph::node_id>(id));
    else {
      plans[id]->graph_outputs.push_back(static_cast<uint32_t>(o));
      ++state->computed_outputs;
    }
  }
  for (std::size_t i = nodes.size(); i-- > 0;) {
    if (!plans[i]) continue;
    actor_of[i] = rt.system().spawn(node_behavior, plans[i]);
    state->actors.push_back(actor_of[i]);
    if (plans[i]->arriving == 0) state->starters.push_back(actor_of[i]);
    // This node's inputs: tell each producer (already planned) or parameter that it reads them.
    for (std::size_t s = 0; s < nodes[i].inputs.size(); ++s) {
      const auto in = static_cast<std::size_t>(nodes[i].inputs[s]);
      const reader r{actor_of[i], static_cast<uint32_t>(s)};
      if (nodes[in].kind == graph::node_kind::parameter) state->parameter_readers[parameter_index[in]].push_back(r);
      else if (plans[in]) plans[in]->readers.push_back(r);
    }
  }
  state->g = std::move(g);
  return graph_executor{std::move(state)};
}

expected<std::vector<tensor>> graph_executor::run(const std::vector<tensor>& parameters, std::chrono::milliseconds timeout) {
  auto& s = *impl_;
  AF_TRY(graph::check_parameters(s.g, parameters));
  const uint64_t step = ++s.step;
  std::vector<tensor> outputs(s.output_parameter.size());
  for (std::size_t o = 0; o < outputs.size(); ++o)
    outputs[o] = s.output_parameter[o] ? parameters[*s.output_parameter[o]] : s.output_constant[o];
  for (std::size_t k = 0; k < parameters.size(); ++k) {
    detail::tsan_release_payload(parameters[k]);
    for (const auto& r : s.parameter_readers[k]) s.caller->send(r.who, gx_input_atom::value, step, r.slot, parameters[k]);
  }
  for (const auto& a : s.starters) s.caller->send(a, gx_input_atom::value, step, start_slot, tensor{});
  std::size_t arrived = 0;
  std::optional<error> failure;
  bool timed_out = false;
  while (arrived < s.computed_outputs && !failure && !timed_out) {
    s.caller->receive(
        [&](gx_output_atom, uint64_t from_step, uint32_t index, tensor& value) {
          if (from_step != step) return;
          detail::tsan_acquire_payload(value);
          outputs[index] = std::move(value);
          ++arrived;
        },
        [&](gx_failed_atom, uint64_t from_step, caf::error& err) {
          if (from_step == step) failure = from_caf_error(err);
        },
        caf::after(timeout) >> [&] { timed_out = true; });
  }
  if (failure) return *failure;
  if (timed_out)
    return make_error(errc::timeout, "graph step " + std::to_string(step) + ": " + std::to_string(arrived) + " of " +
                                         std::to_string(s.computed_outputs) + " outputs within " +
                                         std::to_string(timeout.count()) + " ms");
  return outputs;
}

}  // namespace af
