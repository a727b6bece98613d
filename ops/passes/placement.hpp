#pragma once

// Placement: where a value made on one device is read on another whose memory the first cannot
// share (host memory and a GPU's, two GPUs), a "copy" node on the reading device brings it over.
// Executors run this pass with what their backends say about their memory; between host-memory
// devices (any two CPU devices) nothing is inserted.

#include <functional>
#include <string>

#include "ops/graph/graph.hpp"

namespace af::graph {

/// Whether a value made on device `from` needs a copy to be read on device `to` (placements as
/// nodes carry them; "" is the executor's default device).
using copy_rule = std::function<bool(const std::string& from, const std::string& to)>;

/// `g` with one "copy" node per value and reading device where `needs_copy` says so; the readers
/// take the copy. Results are unchanged. Constants are not copied per step: an executor puts each
/// reader's constants on its device once, when it launches.
graph insert_copies(const graph& g, const copy_rule& needs_copy);

}  // namespace af::graph
