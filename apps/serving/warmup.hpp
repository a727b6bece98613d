#pragma once

// A version's warmup before it takes traffic: its first batches pay for kernel selection, graph
// re-optimisation per batch size and page faults on the mapped weights; a client should not.

#include <string>

#include "actors/batching.hpp"
#include "ops/graph/module.hpp"

namespace af::serving {

/// Where TensorFlow Serving keeps recorded warmup requests, under a version's directory.
inline constexpr const char* warmup_records_path = "assets.extra/tf_serving_warmup_requests";

/// Runs the recorded warmup requests of `version_dir` for this signature if the version has them,
/// else one batch of zeros per batch size the queue can form (1, each allowed size, the maximum),
/// through `queue`. An error (a request the model fails on) refuses the version.
expected<void> warm_up(const std::string& version_dir, const graph::signature& signature, const batching_queue& queue,
                       const batching_options& options);

}  // namespace af::serving
