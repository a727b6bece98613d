#pragma once

// Conversions between af::error (the value every layer below returns) and caf::error (what crosses
// actor boundaries). Include only from actor translation units.

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>

#include <string>

#include "ops/error.hpp"

namespace af {

/// CAF error category of af::errc values.
inline constexpr caf::atom_value errc_category = caf::atom("af");

/// af::errc with a context string as a caf::error; errc::none gives an empty (success) error.
caf::error make_caf_error(errc code, std::string context);
caf::error to_caf_error(const error& err);
/// Back to af::error. CAF's own errors (sec) become errc values with CAF's text as context:
/// a timed-out request is errc::timeout; an unreachable/dead peer is errc::peer_down.
error from_caf_error(const caf::error& err);

/// Registers the "af" category so that to_string(caf::error) prints "shape_mismatch: add: ...".
void register_error_category(caf::actor_system_config& cfg);

}  // namespace af
