#pragma once

// A device as an actor: it owns a backend (ops/runtime/backend.hpp: memory, kernels, queue) and runs
// kernels on request through it, one request at a time in arrival order. Include only from actor
// translation units (pulls in CAF).
//
// Protocol (typed):
//   (exec_atom, op name, inputs, attrs) -> outputs, or an af error naming the op
//   (stats_atom)                        -> the device allocator's statistics

#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/message_types.hpp"
#include "ops/allocator.hpp"
#include "ops/op_registry.hpp"
#include "ops/tensor.hpp"

namespace af {

using exec_atom = caf::atom_constant<caf::atom("af_exec")>;
using stats_atom = caf::atom_constant<caf::atom("af_stats")>;

using device_actor = caf::typed_actor<
    caf::replies_to<exec_atom, std::string, std::vector<tensor>, op_attrs>::with<std::vector<tensor>>,
    caf::replies_to<stats_atom>::with<allocator_stats>>;

class backend;

struct device_options {
  /// Name in errors and spans ("cpu:0").
  std::string name = "cpu:0";
  /// Policy and limit of the device's own allocator; outputs live there, so the limit bounds them.
  allocator_options memory;
  /// The kernels it runs; null means default_op_registry().
  std::shared_ptr<const op_registry> ops;
};

/// Spawns a CPU device actor; the allocator's error (a preallocate policy without a limit, an arena
/// the system refuses) when it cannot be made.
expected<device_actor> spawn_cpu_device(caf::actor_system& sys, device_options options = {});
/// Spawns a device actor that runs everything through `device` (named by its properties).
device_actor spawn_device(caf::actor_system& sys, std::shared_ptr<backend> device);

/// Registers op_attrs and allocator_stats as message types (configure_actor_system calls it).
void register_device_message_types(caf::actor_system_config& cfg);

// -- inspection ---------------------------------------------------------------------------------

/// op_attrs on the wire: parallel lists (CAF 0.17 cannot inspect std::variant).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_attrs& x) {
  std::vector<std::string> names;
  std::vector<uint8_t> kinds;  // the variant index
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::vector<int64_t>> lists;
  std::vector<std::string> strings;
  std::vector<std::vector<double>> float_lists;
  if constexpr (Inspector::reads_state) {
    for (const auto& [name, value] : x.entries()) {
      names.push_back(name);
      kinds.push_back(static_cast<uint8_t>(value.index()));
      if (auto* i = std::get_if<int64_t>(&value)) ints.push_back(*i);
      if (auto* d = std::get_if<double>(&value)) floats.push_back(*d);
      if (auto* l = std::get_if<std::vector<int64_t>>(&value)) lists.push_back(*l);
      if (auto* s = std::get_if<std::string>(&value)) strings.push_back(*s);
      if (auto* l = std::get_if<std::vector<double>>(&value)) float_lists.push_back(*l);
    }
    return f(names, kinds, ints, floats, lists, strings, float_lists);
  } else {
    auto err = f(names, kinds, ints, floats, lists, strings, float_lists);
    if (err) return err;
    if (kinds.size() != names.size()) return caf::make_error(caf::sec::invalid_argument, "op_attrs");
    std::size_t next[5] = {0, 0, 0, 0, 0};
    const std::size_t sizes[5] = {ints.size(), floats.size(), lists.size(), strings.size(), float_lists.size()};
    op_attrs out;
    for (std::size_t i = 0; i < names.size(); ++i) {
      const uint8_t k = kinds[i];
      if (k > 4 || next[k] >= sizes[k]) return caf::make_error(caf::sec::invalid_argument, "op_attrs");
      const std::size_t j = next[k]++;
      if (k == 0) out.set(names[i], ints[j]);
      if (k == 1) out.set(names[i], floats[j]);
      if (k == 2) out.set(names[i], lists[j]);
      if (k == 3) out.set(names[i], strings[j]);
      if (k == 4) out.set(names[i], float_lists[j]);
    }
    x = std::move(out);
    return err;
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, allocator_stats& x) {
  return f(x.bytes_in_use, x.peak_bytes_in_use, x.bytes_reserved, x.bytes_cached, x.allocations,
           x.deallocations, x.cache_hits, x.cache_misses);
}

}  // namespace af
