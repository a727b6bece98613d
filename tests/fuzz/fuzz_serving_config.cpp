// Fuzzes the readers of TF Serving's configuration files: a BatchingParameters text (the
// --batching_parameters_file), a ModelServerConfig text (the --model_config_file), an SSLConfig
// text (the --ssl_config_file) and a MonitoringConfig text (the --monitoring_config_file).
//
// Input: one byte choosing the parser (modulo 4: batching parameters, model config, SSL config,
// monitoring config), then the text.
// Invariants: no crash or hang; a refusal is malformed_input (does not parse), invalid_argument
// or unsupported (does not fit), with a message naming the file; accepted batching options keep
// the rules read_batching_parameters promises, and accepted models have unique, non-empty names
// and base paths; an accepted SSL config has PEM key and certificate, and a CA when it verifies
// clients; an accepted monitoring path is empty (off) or a URL path.

#include <set>
#include <string>

#include "apps/serving/serving_config.hpp"
#include "fuzz_support.hpp"

namespace {

using namespace af;

void check_refusal(const error& e) {
  AF_FUZZ_CHECK(e.code == errc::malformed_input || e.code == errc::invalid_argument || e.code == errc::unsupported,
                "a config was refused with " + e.to_string());
  AF_FUZZ_CHECK(e.message.rfind("fuzz.conf", 0) == 0, "a refusal does not name the file: " + e.message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text{af::fuzz::as_chars(data + 1, size - 1)};
  if (data[0] % 4 == 3) {
    auto path = serving::parse_monitoring_config(text, "fuzz.conf");
    if (!path) return check_refusal(path.error_value()), 0;
    AF_FUZZ_CHECK(path->empty() || ((*path)[0] == '/' && path->find_first_of("?# \t\r\n") == std::string::npos),
                  "a monitoring path that is not a URL path was accepted: " + *path);
    return 0;
  }
  if (data[0] % 4 == 2) {
    auto tls = serving::parse_ssl_config(text, "fuzz.conf");
    if (!tls) return check_refusal(tls.error_value()), 0;
    AF_FUZZ_CHECK(tls->server_key.find("-----BEGIN ") != std::string::npos && tls->server_cert.find("-----BEGIN ") != std::string::npos,
                  "an SSL config without PEM key and certificate was accepted");
    AF_FUZZ_CHECK(!tls->client_verify || !tls->custom_ca.empty(), "client_verify without custom_ca was accepted");
    return 0;
  }
  if (data[0] % 4 == 0) {
    auto options = serving::parse_batching_parameters(text, "fuzz.conf");
    if (!options) return check_refusal(options.error_value()), 0;
    AF_FUZZ_CHECK(options->max_batch_size >= 1 && options->max_enqueued_batches >= 1 && options->num_batch_threads >= 1,
                  "a count below 1 was accepted");
    AF_FUZZ_CHECK(options->batch_timeout.count() >= 0, "a negative batch_timeout_micros was accepted");
    for (std::size_t i = 1; i < options->allowed_batch_sizes.size(); ++i)
      AF_FUZZ_CHECK(options->allowed_batch_sizes[i - 1] < options->allowed_batch_sizes[i], "allowed_batch_sizes that do not increase");
    AF_FUZZ_CHECK(options->allowed_batch_sizes.empty() || options->allowed_batch_sizes.back() == options->max_batch_size,
                  "allowed_batch_sizes that do not end at max_batch_size");
    return 0;
  }
  auto models = serving::parse_model_config(text, "fuzz.conf");
  if (!models) return check_refusal(models.error_value()), 0;
  AF_FUZZ_CHECK(!models->empty(), "a config without models was accepted");
  std::set<std::string> names;
  for (const auto& m : *models) {
    AF_FUZZ_CHECK(!m.name.empty() && !m.base_path.empty(), "a model without a name or base path was accepted");
    AF_FUZZ_CHECK(names.insert(m.name).second, "two models of one name were accepted");
  }
  return 0;
}
