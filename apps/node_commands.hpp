#pragma once

/// `actorflow node ...`: two processes exchanging tensors on loopback (actors/remote_node.hpp).
/// argv[0] is the subcommand name ("receive", "send", or "node" for run_node).
namespace af::apps {

/// `node receive PORT [--window W] [--verbose]`: publishes a tensor receiver on 127.0.0.1:PORT
/// (0 = any free port, printed), takes one stream and reports count, bytes, throughput, checksum.
int run_receive(int argc, char** argv);
/// `node send HOST PORT [--count N] [--shape 1024,1024] [--dtype f32] [--transport tcp|caf]
/// [--window W]`: sends N tensors to a receiver and reports the throughput.
int run_send(int argc, char** argv);
/// `node receive ...` | `node send ...`: dispatches to the two above.
int run_node(int argc, char** argv);

}  // namespace af::apps
