#pragma once

// Control-plane messages between a remote_sender's control actor (S) and a remote_receiver's
// published control actor (R). Include only from actor translation units (pulls in CAF).
//
//   S -> R  request (hello_atom, caf::actor S, uint32_t transport, uint32_t window)
//           reply   (uint32_t window, uint16_t data_port, uint64_t token)   or an af error (busy)
//   R -> S  (flow::demand_atom, uint64_t n)  credit: the receiver's consumer took n tensors
//   R -> S  (done_atom, uint64_t count)      end of stream reached with `count` tensors, all intact
//   R -> S  (flow::fail_atom, caf::error)    the receiver rejected the stream (af::errc + context)
//   caller -> R  (tensor_atom, tensor)     only with bulk_transport::caf_messages
//   caller -> R  (end_atom, uint64_t count) only with bulk_transport::caf_messages
//
// With bulk_transport::tcp_socket the sender opens the data port, writes the 8-byte token and then
// tensor frames (serialization/tensor_frame.hpp) ending with an end frame. Each side monitors the
// other's control actor; a down message fails everything pending with errc::peer_down.
//
// Credit and rejection are the generic flow protocol's messages (actors/flow_protocol.hpp); the
// handshake, the CAF-borne tensors and the counted end/done are specific to a stream between nodes
// whose bulk bytes may travel outside CAF.

#include <caf/atom.hpp>

#include "actors/flow_protocol.hpp"

namespace af::remote {

using hello_atom = caf::atom_constant<caf::atom("rn_hello")>;
using done_atom = caf::atom_constant<caf::atom("rn_done")>;
using tensor_atom = caf::atom_constant<caf::atom("rn_tensor")>;
using end_atom = caf::atom_constant<caf::atom("rn_end")>;

}  // namespace af::remote
