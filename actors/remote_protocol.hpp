#pragma once

// Control-plane messages between a remote_sender's control actor (S) and a remote_receiver's
// published control actor (R). Include only from actor translation units (pulls in CAF).
//
//   S -> R  request (hello_atom, caf::actor S, uint32_t transport, uint32_t window)
//           reply   (uint32_t window, uint16_t data_port, uint64_t token)   or an af error (busy)
//   R -> S  (credit_atom, uint32_t n)      the receiver's consumer took n tensors
//   R -> S  (done_atom, uint64_t count)    end of stream reached with `count` tensors, all intact
//   R -> S  (fail_atom, uint8_t errc, std::string context)   the receiver rejected the stream
//   caller -> R  (tensor_atom, tensor)     only with bulk_transport::caf_messages
//   caller -> R  (end_atom, uint64_t count) only with bulk_transport::caf_messages
//
// With bulk_transport::tcp_socket the sender opens the data port, writes the 8-byte token and then
// tensor frames (serialization/tensor_frame.hpp) ending with an end frame. Each side monitors the
// other's control actor; a down message fails everything pending with errc::peer_down.
//
// The generic credit protocol (actors/flow_protocol.hpp) had not landed when this was written and
// speaks batches of elements; a stream of single tensors with a socket data plane needs only these.

#include <caf/atom.hpp>

namespace af::remote {

using hello_atom = caf::atom_constant<caf::atom("rn_hello")>;
using credit_atom = caf::atom_constant<caf::atom("rn_credit")>;
using done_atom = caf::atom_constant<caf::atom("rn_done")>;
using fail_atom = caf::atom_constant<caf::atom("rn_fail")>;
using tensor_atom = caf::atom_constant<caf::atom("rn_tensor")>;
using end_atom = caf::atom_constant<caf::atom("rn_end")>;

}  // namespace af::remote
