#pragma once

// A closed-loop gRPC client for bench_serving: TensorFlow Serving's PredictionService/Predict
// with the input as tensor_content (the packed bytes TF Serving's own clients send), so that the
// serving topology can be measured without JSON in the way. One thread drives a completion
// queue; `in_flight` calls stay outstanding, spread over `channels` HTTP/2 connections, and each
// answer sends the next call at once.
//
// gRPC's and protobuf's headers stay in grpc_load.cpp.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/tensor.hpp"

namespace af::bench {

struct grpc_load_options {
  uint16_t port = 0;  // on 127.0.0.1
  std::string model = "m";
  std::string input = "x";  // the signature's input name
  std::size_t in_flight = 32;
  std::size_t channels = 2;
  std::chrono::milliseconds warmup{300};  // calls answered in this span are not counted
  std::chrono::milliseconds duration{2000};
};

struct grpc_load_result {
  uint64_t ok = 0, failed = 0;  // counted calls
  double seconds = 0;
  double ok_per_second = 0;
  std::string first_error;  // of a failed call, when there was one
};

/// Sends `rows` (its first dim: the rows of one request) as every call's input.
grpc_load_result run_grpc_closed_loop(const tensor& rows, const grpc_load_options& options);

}  // namespace af::bench
