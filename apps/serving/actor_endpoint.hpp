#pragma once

// The model server as a CAF actor another process reaches (`actorflow serve --actor_port=P`;
// af::serving::client in actors/serving_client.hpp): requests go straight into the batching
// topology, tensors travel as CAF messages.

#include <cstdint>
#include <memory>
#include <string>

#include "ops/error.hpp"

namespace af {
class runtime;
}

namespace af::serving {

class model_server;

class actor_endpoint {
 public:
  /// Publishes the endpoint on address:port (0 picks a free port); the runtime needs its network.
  /// io_error naming the address when it cannot listen. `models` must outlive the endpoint. With
  /// a `bearer_token`, every message must carry it (actors/serving_protocol.hpp), else it is
  /// refused with protocol_violation.
  static expected<std::unique_ptr<actor_endpoint>> start(runtime& rt, model_server& models, const std::string& address,
                                                         uint16_t port, std::string bearer_token = {});
  /// Stops listening; requests in flight are still answered.
  ~actor_endpoint();
  actor_endpoint(const actor_endpoint&) = delete;
  actor_endpoint& operator=(const actor_endpoint&) = delete;

  uint16_t port() const;

  struct impl;

 private:
  explicit actor_endpoint(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::serving
