#pragma once

// The models a server serves, by name and version (TensorFlow Serving's model manager). Each model
// has a base path with numbered version directories (SavedModels); a poller thread scans them,
// loads the versions its policy wants (checked against their MANIFEST, warmed up), and only then
// routes traffic to them; a version leaving the policy stops taking requests, drains the ones in
// flight and unloads. A version that fails to load is refused (its error is its status) and the
// versions already serving keep serving; it is tried again once its directory changes.
//
// Every version's signatures run behind a batching queue (actors/batching.hpp): with batching
// enabled, requests are joined into batches; without, each request runs alone on the same bounded
// topology.
//
//   auto server = af::serving::model_server::start(rt, {{.name = "digits", .base_path = "/models/digits"}},
//                                                  {.enable_batching = true}).value();
//   server->predict_async({.name = "digits"}, {{"images", rows}}, std::nullopt, [](auto answer) { ... });

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/batching.hpp"
#include "actors/serving_types.hpp"
#include "ops/element.hpp"
#include "ops/graph/module.hpp"

namespace af {
class runtime;
}

namespace af::serving {

class serving_metrics;

/// Which versions of a model to serve (TensorFlow Serving's ServableVersionPolicy).
struct version_policy {
  enum class kind { latest, all, specific };
  kind choice = kind::latest;
  uint32_t latest_count = 1;             ///< latest: this many of the highest versions
  std::vector<int64_t> specific_versions;  ///< specific: exactly these
  friend bool operator==(const version_policy&, const version_policy&) = default;
};

/// One model (an entry of --model_config_file, or --model_name with --model_base_path).
struct model_config {
  std::string name;
  std::string base_path;
  version_policy policy;
  /// Names for versions ("stable" -> 3), usable instead of a number in requests.
  std::map<std::string, int64_t> version_labels;
  /// Fields of its config entry that the server takes without acting on them (logging_config,
  /// model_type), so that the operator can be told.
  std::vector<std::string> ignored_fields;
  friend bool operator==(const model_config&, const model_config&) = default;
};

struct server_options {
  /// Join requests into batches (TF Serving's --enable_batching); the options below apply then.
  bool enable_batching = false;
  batching_options batching;
  /// Without batching: replicas per signature, each running one request at a time.
  std::size_t unbatched_threads = 2;
  /// How often the base paths are scanned for new versions; zero scans only at start.
  std::chrono::milliseconds poll_interval{1000};
};

/// A request's answer: which version and signature ran it, and the outputs in signature order.
struct prediction {
  std::string model;
  int64_t version = 0;
  std::shared_ptr<const graph::signature> signature;
  std::vector<tensor> outputs;
};

class model_server {
 public:
  /// Scans every base path and loads what the policies want before returning (so that a server
  /// answers as soon as it is up); invalid_argument for a config that does not fit (two models of
  /// one name, a missing base path, an unknown label target is allowed: it resolves once loaded).
  static expected<std::unique_ptr<model_server>> start(runtime& rt, std::vector<model_config> models,
                                                       server_options options, std::shared_ptr<serving_metrics> metrics = nullptr);
  ~model_server();
  model_server(const model_server&) = delete;
  model_server& operator=(const model_server&) = delete;

  /// Runs the request through the version's batching queue; `done` is called once, from another
  /// thread (or this one, for a request refused at once). Errors: not_found for an unknown model,
  /// version, label or signature; the queue's errors otherwise.
  void predict_async(const model_spec& spec, std::vector<named_tensor> inputs,
                     std::optional<clock_type::time_point> deadline, std::function<void(expected<prediction>)> done);
  /// The same, blocking the calling thread.
  expected<prediction> predict(const model_spec& spec, std::vector<named_tensor> inputs,
                               std::optional<clock_type::time_point> deadline = std::nullopt);

  /// Whether a request for `spec` may go in now, asked before its body is decoded so that refusing
  /// costs far less than serving: not_found when the spec does not resolve, resource_exhausted
  /// when the queue of its signature (empty: serving_default) is full. A refusal is counted as the
  /// queue's and as a request with outcome resource_exhausted, as predict_async counts its own.
  expected<void> admit(const model_spec& spec) const;

  /// Every version the server knows of (one, when spec.version is given), highest first.
  expected<std::vector<version_status>> status(const std::string& model, std::optional<int64_t> version) const;
  /// The signature a spec resolves to (spec.signature_name, empty: serving_default), shared so
  /// that a front end may keep it while it decodes a request.
  expected<std::shared_ptr<const graph::signature>> find_signature(const model_spec& spec) const;
  /// The signatures of the version a spec resolves to, and its number.
  expected<std::pair<int64_t, std::vector<graph::signature>>> signatures(const model_spec& spec) const;
  std::vector<std::string> model_names() const;

  /// Serves `models` from now on (TF Serving's HandleReloadConfigRequest, or a changed
  /// --model_config_file): models new to the list are loaded, those left out drain and unload,
  /// those kept take their new policy and labels (a new base path loads its versions before the
  /// old path's stop serving). Returns once the loads it started are done. invalid_argument, with
  /// nothing changed, for a list start() would refuse.
  expected<void> reconfigure(std::vector<model_config> models);

  /// Scans the base paths now (what the poller does every poll_interval); returns once the loads
  /// and unloads it started are done. For tests and for a SIGHUP-style reload.
  void poll_now();

  struct impl;

 private:
  explicit model_server(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af::serving
