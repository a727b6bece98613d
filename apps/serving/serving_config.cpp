#include "apps/serving/serving_config.hpp"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "tensorflow_serving/config/model_server_config.pb.h"
#include "tensorflow_serving/config/monitoring_config.pb.h"
#include "tensorflow_serving/config/ssl_config.pb.h"
#include "tensorflow_serving/servables/tensorflow/session_bundle_config.pb.h"

namespace af::serving {

namespace {

namespace pb = google::protobuf;

// "path:line:column" (1-based) where a location is known, else "path".
std::string where(const std::string& path, pb::TextFormat::ParseLocation loc) {
  if (loc.line < 0) return path;
  return path + ":" + std::to_string(loc.line + 1) + ":" + std::to_string(loc.column + 1);
}

// Keeps the first error the text parser reports (the later ones follow from it).
class first_error_collector : public pb::io::ErrorCollector {
 public:
  explicit first_error_collector(const std::string& path) : path_(path) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!error_) error_ = make_error(errc::malformed_input, where(path_, {line, column}) + ": " + message);
  }
  void AddWarning(int, pb::io::ColumnNumber, const std::string&) override {}
  error take() { return error_ ? std::move(error_) : make_error(errc::malformed_input, path_ + ": does not parse"); }

 private:
  const std::string& path_;
  error error_;
};

// The text of a configuration file, refused past max_config_file_bytes (a config that large is
// not one: the size of what is read stays bounded whatever the path names).
expected<std::string> read_config_text(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in) return make_error(errc::io_error, path + ": cannot open: " + std::strerror(errno));
  std::string text(max_config_file_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return make_error(errc::io_error, path + ": cannot read: " + std::strerror(errno));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > max_config_file_bytes)
    return make_error(errc::invalid_argument, path + ": larger than " + std::to_string(max_config_file_bytes) + " bytes");
  return text;
}

// `message` parsed from `text` (named `path` in errors); `locations` learns where each field was
// written. protobuf's text parser bounds nesting itself (100 levels).
expected<void> parse_text(const std::string& text, const std::string& path, pb::Message& message,
                          pb::TextFormat::ParseInfoTree& locations) {
  first_error_collector errors{path};
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&locations);
  if (!parser.ParseFromString(text, &message)) return errors.take();
  return {};
}

// Where field `name` of the message that `tree` describes was written (its index-th value).
pb::TextFormat::ParseLocation location_of(const pb::TextFormat::ParseInfoTree* tree, const pb::Message& message,
                                          const char* name, int index = 0) {
  const auto* field = message.GetDescriptor()->FindFieldByName(name);
  if (tree == nullptr || field == nullptr) return {};
  return tree->GetLocation(field, field->is_repeated() ? index : -1);
}

error invalid(const std::string& path, pb::TextFormat::ParseLocation loc, const std::string& what) {
  return make_error(errc::invalid_argument, where(path, loc) + ": " + what);
}

}  // namespace

expected<batching_options> read_batching_parameters(const std::string& path) {
  AF_TRY_ASSIGN(auto text, read_config_text(path));
  return parse_batching_parameters(text, path);
}

expected<batching_options> parse_batching_parameters(const std::string& text, const std::string& path) {
  tensorflow::serving::BatchingParameters params;
  pb::TextFormat::ParseInfoTree tree;
  AF_TRY(parse_text(text, path, params, tree));
  auto at = [&](const char* name, int index = 0) { return location_of(&tree, params, name, index); };

  batching_options options;
  auto positive = [&](const char* name, int64_t value) -> expected<std::size_t> {
    if (value < 1) return invalid(path, at(name), std::string{name} + " must be at least 1 (is " + std::to_string(value) + ")");
    return static_cast<std::size_t>(value);
  };
  if (params.has_max_batch_size()) {
    AF_TRY_ASSIGN(options.max_batch_size, positive("max_batch_size", params.max_batch_size().value()));
  }
  if (params.has_batch_timeout_micros()) {
    const int64_t micros = params.batch_timeout_micros().value();
    if (micros < 0) return invalid(path, at("batch_timeout_micros"), "batch_timeout_micros must not be negative (is " + std::to_string(micros) + ")");
    options.batch_timeout = std::chrono::microseconds{micros};
  }
  if (params.has_max_enqueued_batches()) {
    AF_TRY_ASSIGN(options.max_enqueued_batches, positive("max_enqueued_batches", params.max_enqueued_batches().value()));
  }
  if (params.has_num_batch_threads()) {
    AF_TRY_ASSIGN(options.num_batch_threads, positive("num_batch_threads", params.num_batch_threads().value()));
  }
  // thread_pool_name: our replicas are actors on the runtime's scheduler; there is no pool to name.
  if (params.has_enable_large_batch_splitting() && params.enable_large_batch_splitting().value())
    return make_error(errc::unsupported, where(path, at("enable_large_batch_splitting")) +
                                             ": enable_large_batch_splitting: true is not supported (a request larger "
                                             "than max_batch_size is refused, not split); remove it or set it to false");
  if (params.has_max_execution_batch_size()) {
    AF_TRY(positive("max_execution_batch_size", params.max_execution_batch_size().value()));
  }
  for (int i = 0; i < params.allowed_batch_sizes_size(); ++i) {
    const int64_t size = params.allowed_batch_sizes(i);
    if (size < 1) return invalid(path, at("allowed_batch_sizes", i), "allowed_batch_sizes must be at least 1 (is " + std::to_string(size) + ")");
    if (i > 0 && size <= params.allowed_batch_sizes(i - 1))
      return invalid(path, at("allowed_batch_sizes", i),
                     "allowed_batch_sizes must increase (" + std::to_string(size) + " follows " +
                         std::to_string(params.allowed_batch_sizes(i - 1)) + ")");
    options.allowed_batch_sizes.push_back(static_cast<std::size_t>(size));
  }
  if (!options.allowed_batch_sizes.empty() && options.allowed_batch_sizes.back() != options.max_batch_size) {
    const int last = params.allowed_batch_sizes_size() - 1;
    return invalid(path, at("allowed_batch_sizes", last),
                   "the last of allowed_batch_sizes (" + std::to_string(options.allowed_batch_sizes.back()) +
                       ") must equal max_batch_size (" + std::to_string(options.max_batch_size) +
                       (params.has_max_batch_size() ? "" : ", its default") + ")");
  }
  options.pad_variable_length_inputs = params.pad_variable_length_inputs();
  return options;
}

expected<std::vector<model_config>> read_model_config(const std::string& path) {
  AF_TRY_ASSIGN(auto text, read_config_text(path));
  return parse_model_config(text, path);
}

expected<std::vector<model_config>> parse_model_config(const std::string& text, const std::string& path) {
  tensorflow::serving::ModelServerConfig config;
  pb::TextFormat::ParseInfoTree tree;
  AF_TRY(parse_text(text, path, config, tree));
  if (!config.has_model_config_list() || config.model_config_list().config_size() == 0)
    return make_error(errc::invalid_argument, path + ": lists no models (expected model_config_list { config { ... } })");

  const auto& list = config.model_config_list();
  const auto* list_tree = tree.GetTreeForNested(config.GetDescriptor()->FindFieldByName("model_config_list"), -1);
  std::vector<model_config> out;
  std::set<std::string> names;
  for (int i = 0; i < list.config_size(); ++i) {
    const auto& entry = list.config(i);
    const auto entry_at = location_of(list_tree, list, "config", i);
    const auto* entry_tree = list_tree ? list_tree->GetTreeForNested(list.GetDescriptor()->FindFieldByName("config"), i) : nullptr;
    auto at = [&](const char* name) {
      auto loc = location_of(entry_tree, entry, name);
      return loc.line >= 0 ? loc : entry_at;
    };

    model_config model;
    model.name = entry.name();
    if (model.name.empty()) return invalid(path, entry_at, "a model config without a name");
    if (!names.insert(model.name).second) return invalid(path, at("name"), "model '" + model.name + "' is configured twice");
    model.base_path = entry.base_path();
    if (model.base_path.empty()) return invalid(path, entry_at, "model '" + model.name + "' has no base_path");
    const auto& platform = entry.model_platform();
    if (!platform.empty() && platform != "tensorflow" && platform != "actorflow")
      return invalid(path, at("model_platform"), "model '" + model.name + "': model_platform '" + platform +
                                                     "' is not served here (\"tensorflow\" or \"actorflow\")");

    if (entry.has_model_version_policy()) {
      const auto& policy = entry.model_version_policy();
      if (policy.has_all()) {
        model.policy.choice = version_policy::kind::all;
      } else if (policy.has_specific()) {
        model.policy.choice = version_policy::kind::specific;
        if (policy.specific().versions_size() == 0)
          return invalid(path, at("model_version_policy"), "model '" + model.name + "': a specific version policy lists no versions");
        for (int64_t v : policy.specific().versions()) {
          if (v < 0) return invalid(path, at("model_version_policy"), "model '" + model.name + "': version " + std::to_string(v) + " is negative");
          model.policy.specific_versions.push_back(v);
        }
      } else if (policy.has_latest()) {
        model.policy.choice = version_policy::kind::latest;
        model.policy.latest_count = std::max<uint32_t>(1, policy.latest().num_versions());
      }
    }
    if (entry.has_logging_config()) model.ignored_fields.push_back("logging_config");
    if (entry.model_type() != tensorflow::serving::MODEL_TYPE_UNSPECIFIED) model.ignored_fields.push_back("model_type");
    for (const auto& [label, version] : entry.version_labels()) {
      if (label.empty()) return invalid(path, at("version_labels"), "model '" + model.name + "': an empty version label");
      if (version < 0)
        return invalid(path, at("version_labels"), "model '" + model.name + "': label '" + label + "' names version " + std::to_string(version));
      model.version_labels[label] = version;
    }
    out.push_back(std::move(model));
  }
  return out;
}

expected<tls_config> read_ssl_config(const std::string& path) {
  AF_TRY_ASSIGN(auto text, read_config_text(path));
  return parse_ssl_config(text, path);
}

expected<tls_config> parse_ssl_config(const std::string& text, const std::string& path) {
  tensorflow::serving::SSLConfig config;
  pb::TextFormat::ParseInfoTree tree;
  AF_TRY(parse_text(text, path, config, tree));
  auto at = [&](const char* name) { return location_of(&tree, config, name); };
  // The fields hold PEM texts; a path there is the most likely mistake, so it is named.
  auto pem = [&](const char* name, const std::string& value) -> error {
    if (value.empty()) return invalid(path, at(name), std::string{name} + " is missing (the PEM text itself, not a path)");
    if (value.find("-----BEGIN ") == std::string::npos)
      return invalid(path, at(name), std::string{name} + " is not PEM text (it holds the key or certificate itself, not a path)");
    return {};
  };
  if (auto e = pem("server_key", config.server_key())) return e;
  if (auto e = pem("server_cert", config.server_cert())) return e;
  if (!config.custom_ca().empty())
    if (auto e = pem("custom_ca", config.custom_ca())) return e;
  if (config.client_verify() && config.custom_ca().empty())
    return invalid(path, at("client_verify"), "client_verify needs custom_ca, the authority client certificates are checked against");
  return tls_config{config.server_key(), config.server_cert(), config.custom_ca(), config.client_verify()};
}

expected<std::string> read_monitoring_config(const std::string& path) {
  AF_TRY_ASSIGN(auto text, read_config_text(path));
  return parse_monitoring_config(text, path);
}

expected<std::string> parse_monitoring_config(const std::string& text, const std::string& path) {
  tensorflow::serving::MonitoringConfig config;
  pb::TextFormat::ParseInfoTree tree;
  AF_TRY(parse_text(text, path, config, tree));
  const auto& prometheus = config.prometheus_config();
  if (!prometheus.enable()) return std::string{};
  if (prometheus.path().empty()) return std::string{"/monitoring/prometheus/metrics"};
  const std::string& served = prometheus.path();
  const bool plain = served.find_first_of("?# \t\r\n") == std::string::npos;
  if (served.front() != '/' || !plain) {
    const auto* nested = tree.GetTreeForNested(config.GetDescriptor()->FindFieldByName("prometheus_config"), -1);
    return invalid(path, location_of(nested, prometheus, "path"),
                   "prometheus_config.path '" + served + "' must be a URL path: starting with '/', without '?', '#' or spaces");
  }
  return served;
}

}  // namespace af::serving
