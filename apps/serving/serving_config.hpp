#pragma once

// TensorFlow Serving's configuration files, read as protobuf text format into plain structs:
//
//   --batching_parameters_file   a BatchingParameters message
//       max_batch_size { value: 32 }
//       batch_timeout_micros { value: 1000 }
//       max_enqueued_batches { value: 16 }
//       num_batch_threads { value: 4 }
//       allowed_batch_sizes: 8
//       allowed_batch_sizes: 32
//       pad_variable_length_inputs: true
//   --ssl_config_file            an SSLConfig message (PEM texts)
//       server_key: "-----BEGIN PRIVATE KEY-----\n..."  server_cert: "-----BEGIN CERTIFICATE-----\n..."
//       custom_ca: "..."  client_verify: true
//   --model_config_file          a ModelServerConfig message
//       model_config_list {
//         config {
//           name: "digits"  base_path: "/models/digits"  model_platform: "tensorflow"
//           model_version_policy { specific { versions: 1 versions: 2 } }
//           version_labels { key: "stable" value: 1 }
//         }
//       }
//
// Every error names the file, and the line and column (1-based) of the text at fault: a parse
// error (malformed_input), or a value that does not fit (invalid_argument).

#include <string>
#include <vector>

#include "actors/batching.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/tls_config.hpp"
#include "ops/error.hpp"

namespace af::serving {

/// The batching options a BatchingParameters file sets, over batching_options' defaults. Keys
/// TF Serving has and we take without acting on them: thread_pool_name, max_execution_batch_size
/// (meaningful only with splitting). enable_large_batch_splitting: true is unsupported (naming
/// the key). Checked: every count at least 1, batch_timeout_micros at least 0, allowed_batch_sizes
/// ascending with the last equal to max_batch_size. io_error when the file cannot be read.
expected<batching_options> read_batching_parameters(const std::string& path);
/// The same from the file's text; `path` only names it in errors.
expected<batching_options> parse_batching_parameters(const std::string& text, const std::string& path);

/// The models a ModelServerConfig file lists (its model_config_list). Checked: names unique and
/// not empty, base_path not empty, model_platform empty, "tensorflow" or "actorflow", versions
/// and label targets not negative, a specific policy with at least one version. latest with
/// num_versions 0 (or unset) serves one version, as in TF Serving. logging_config and the
/// deprecated model_type parse and are listed in model_config::ignored_fields.
expected<std::vector<model_config>> read_model_config(const std::string& path);
/// The same from the file's text; `path` only names it in errors.
expected<std::vector<model_config>> parse_model_config(const std::string& text, const std::string& path);

/// TLS settings from an SSLConfig file (--ssl_config_file). Checked: server_key and server_cert
/// present and PEM-looking; client_verify only with a custom_ca to verify against.
expected<tls_config> read_ssl_config(const std::string& path);
/// The same from the file's text; `path` only names it in errors.
expected<tls_config> parse_ssl_config(const std::string& text, const std::string& path);

/// Where the REST port serves Prometheus metrics, from a MonitoringConfig file
/// (--monitoring_config_file):
///       prometheus_config { enable: true  path: "/monitoring/prometheus/metrics" }
/// Empty when the metrics are off (enable false or no prometheus_config, as in TF Serving);
/// TF Serving's default path when enabled without one. Checked: a path starts with '/' and holds
/// no '?', '#' or whitespace.
expected<std::string> read_monitoring_config(const std::string& path);
/// The same from the file's text; `path` only names it in errors.
expected<std::string> parse_monitoring_config(const std::string& text, const std::string& path);

/// The largest configuration file read (anything larger is refused, naming the file).
inline constexpr std::size_t max_config_file_bytes = 16u << 20;

}  // namespace af::serving
