#pragma once

// A model server's actor endpoint (`actorflow serve --actor_port=P`) from another process: the
// same batching topology TF Serving's REST and gRPC clients reach, with tensors sent as CAF
// messages (their bytes in one piece, no JSON or protobuf in between).
//
//   af::runtime rt{{.network = true}};
//   auto c = af::serving::client::connect(rt, "127.0.0.1", 8502).value();
//   auto answer = c.predict({.name = "digits"}, {{"image", images}});     // answer->outputs
//   auto sigs = c.metadata({.name = "digits"});                          // version, signatures
//   auto versions = c.status("digits");

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/serving_types.hpp"
#include "ops/element.hpp"

namespace af {
class runtime;
}

namespace af::serving {

class client {
 public:
  /// Connects to an endpoint; peer_down or io_error naming host:port when nothing answers there,
  /// protocol_violation when the endpoint refuses `bearer_token` (the secret of `actorflow serve
  /// --bearer_token...`; every request carries it). The runtime needs its network
  /// (runtime_options::network).
  static expected<client> connect(runtime& rt, const std::string& host, uint16_t port,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10), const std::string& bearer_token = {});
  client(client&&) noexcept;
  client& operator=(client&&) noexcept;
  ~client();

  struct answer {
    int64_t version = 0;                ///< the version that ran the request
    std::vector<named_tensor> outputs;  ///< by the signature's output names, in its order
  };
  /// Runs `inputs` (by the signature's input names) on the server. `timeout` is the request's
  /// deadline there too: a request the server cannot run in time is refused (timeout) without
  /// running. The server's errors keep their codes (not_found, invalid_argument,
  /// resource_exhausted, ...); a server that went away is peer_down.
  expected<answer> predict(const model_spec& spec, std::vector<named_tensor> inputs,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
  /// The signatures of the version `spec` resolves to, and its number.
  expected<std::pair<int64_t, std::vector<graph::signature>>> metadata(const model_spec& spec) const;
  /// Every version of `model` the server knows of (or one), highest first.
  expected<std::vector<version_status>> status(const std::string& model, std::optional<int64_t> version = std::nullopt) const;

  struct impl;

 private:
  explicit client(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::serving
