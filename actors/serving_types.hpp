#pragma once

// The vocabulary a model server and its clients share: which model a request is for, and the
// states of its versions (TensorFlow Serving's names and numbers).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/error.hpp"
#include "ops/graph/module.hpp"

namespace af::serving {

/// What a request asks for: a model, and a version by number or by label (neither: the highest
/// available), and a signature (empty: serving_default).
struct model_spec {
  std::string name;
  std::optional<int64_t> version;
  std::string version_label;
  std::string signature_name;
};

/// TensorFlow Serving's ModelVersionStatus states (and their numbers in its protos).
enum class version_state : int { unknown = 0, start = 10, loading = 20, available = 30, unloading = 40, end = 50 };
const char* to_string(version_state s) noexcept;

struct version_status {
  int64_t version = 0;
  version_state state = version_state::unknown;
  error status;  ///< why a version ended without serving (its load failed)
};

/// Signatures and statuses as JSON text, for a client in another process (actors/serving_client).
std::string encode_signatures(const std::vector<graph::signature>& signatures);
expected<std::vector<graph::signature>> decode_signatures(const std::string& text);
std::string encode_statuses(const std::vector<version_status>& statuses);
expected<std::vector<version_status>> decode_statuses(const std::string& text);

}  // namespace af::serving
