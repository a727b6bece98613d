#pragma once

// The gRPC front end of `actorflow serve`: TensorFlow Serving's services, wire-compatible, so its
// clients (tensorflow-serving-api's Python stubs, or any stub generated from its protos) work
// unchanged against a model_server.
//
//   tensorflow.serving.PredictionService/Predict           runs a request through the batching queue
//   tensorflow.serving.PredictionService/GetModelMetadata  "signature_def": an Any packing a SignatureDefMap
//   tensorflow.serving.ModelService/GetModelStatus         every version's state and load error
//   tensorflow.serving.ModelService/HandleReloadConfigRequest, Classify, Regress, MultiInference:
//                                                          UNIMPLEMENTED
//
// A Predict's inputs are checked against the signature by name, dtype and shape before their
// elements are copied out of the request, and a typed field's single value may not broadcast past
// max_message_bytes: no call makes the server allocate more than it was sent.
//
// Calls use gRPC's callback API: a Predict hands its request to model_server::predict_async and
// returns its gRPC thread at once; the answer finishes the call from the batcher's thread. So a
// batch that waits for company blocks no gRPC thread.
//
// Errors map to gRPC status codes: not_found NOT_FOUND; invalid_argument, shape_mismatch,
// dtype_mismatch, unknown_dtype, malformed_input, out_of_range INVALID_ARGUMENT;
// resource_exhausted and out_of_memory RESOURCE_EXHAUSTED; timeout DEADLINE_EXCEEDED; cancelled
// CANCELLED; unsupported UNIMPLEMENTED; peer_down UNAVAILABLE; anything else INTERNAL. The message
// is the error's context. A call without the configured token is UNAUTHENTICATED.
//
// gRPC's headers stay in grpc_server.cpp.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "apps/serving/tls_config.hpp"
#include "ops/error.hpp"

namespace af::serving {

class model_server;

struct grpc_options {
  /// The most threads gRPC's resource quota grants the server; 0 leaves gRPC's default. (Handlers
  /// never block, so gRPC's own executor threads suffice; TF Serving's --grpc_max_threads.)
  std::size_t threads = 0;
  /// The largest request received and response sent, in bytes (gRPC's default is 4 MiB, too small
  /// for image batches); at most INT_MAX.
  std::size_t max_message_bytes = std::size_t{1} << 30;
  /// When set, every call must carry the metadata `authorization: Bearer <token>` (else
  /// UNAUTHENTICATED), as REST requests carry the header.
  std::string bearer_token;
  /// When set, the port speaks TLS only (TF Serving's --ssl_config_file); with client_verify, a
  /// client without a certificate custom_ca signed cannot complete the handshake.
  std::optional<tls_config> tls;
  /// gRPC channel arguments for the server (TF Serving's --grpc_channel_arguments), by key: a value
  /// that reads as an integer is passed as one, any other as a string. One given here wins over
  /// the server's own setting of the same key (max message sizes, SO_REUSEPORT).
  std::vector<std::pair<std::string, std::string>> channel_arguments;
};

/// "grpc.max_connection_age_ms=1000,grpc.keepalive_time_ms=60000" as key/value pairs;
/// invalid_argument naming the item for one without a key or without '='.
expected<std::vector<std::pair<std::string, std::string>>> parse_channel_arguments(std::string_view text);

/// gRPC's status code (the numbers of grpc::StatusCode and tensorflow.error.Code) for `code`.
int grpc_status_code(errc code) noexcept;

class grpc_server {
 public:
  /// Listens on `address` ("127.0.0.1:8500", "0.0.0.0:8500", "[::]:8500"; port 0 picks a free
  /// one, see port()) and serves `models`, which must outlive the server. io_error naming the
  /// address when it cannot listen; invalid_argument for options out of range.
  static expected<std::unique_ptr<grpc_server>> start(model_server& models, const std::string& address,
                                                      grpc_options options = {});
  /// Shuts down: refuses new calls, lets calls in flight finish for up to 5 s, then cancels them.
  ~grpc_server();
  grpc_server(const grpc_server&) = delete;
  grpc_server& operator=(const grpc_server&) = delete;

  /// The port it listens on.
  int port() const noexcept;

  struct impl;

 private:
  explicit grpc_server(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::serving
