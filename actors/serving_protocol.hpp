#pragma once

// The messages between a model server's actor endpoint (apps/serving/actor_endpoint) and
// af::serving::client (actors/serving_client), in any two processes. Include only from actor
// translation units.
//
//   (serve_hello_atom, token)                      -> (true)   checks the token once, at connect time
//   (serve_predict_atom, token, model, version (-1: none), label, signature, inputs, timeout_ms (0: none))
//       -> (version, outputs)                      or an af error (not_found, resource_exhausted, ...)
//   (serve_metadata_atom, token, model, version, label) -> (version, signatures as JSON, encode_signatures)
//   (serve_status_atom, token, model, version)     -> statuses as JSON (encode_statuses)
//
// `token` is "Bearer <secret>" (empty when the client has none). An endpoint started with a
// secret refuses every message whose token does not match with protocol_violation. Each request
// carries it, not only the hello: CAF delivers a message to any actor whose id a peer names, so a
// handshake alone would guard nothing.

#include <caf/atom.hpp>

namespace af::serving {

using serve_hello_atom = caf::atom_constant<caf::atom("af_shello")>;
using serve_predict_atom = caf::atom_constant<caf::atom("af_spred")>;
using serve_metadata_atom = caf::atom_constant<caf::atom("af_smeta")>;
using serve_status_atom = caf::atom_constant<caf::atom("af_sstat")>;

/// No version asked for (the highest available).
inline constexpr int64_t any_version = -1;

}  // namespace af::serving
