// `actorflow serve`: TensorFlow Serving's model server, with its flag names.
//
//   actorflow serve --model_name=digits --model_base_path=/models/digits --rest_api_port=8501
//                   [--port=8500] [--actor_port=8502] [--enable_batching [--batching_parameters_file=F]]
//                   [--model_config_file=F [--model_config_file_poll_wait_seconds=0]] [--file_system_poll_wait_seconds=1]
//                   [--monitoring_config_file=F] [--grpc_channel_arguments=k=v,...]
//                   [--bind_address=127.0.0.1] [--rest_api_num_threads=N] [--rest_api_timeout_in_ms=MS]
//                   [--bearer_token_file=F | --bearer_token=T] [--ssl_config_file=F] [--max_body_bytes=N]
//                   [--tensorflow_intra_op_parallelism=N]
//
// Port 0 turns a front end off: REST (--rest_api_port, off by default as in TF Serving), gRPC
// (--port, 8500 by default) and the CAF actor endpoint for af::serving::client (--actor_port, off
// by default). Once serving, one line "serving: ready rest=P grpc=Q actor=R" tells scripts the
// ports (useful with a port of -1: any free port).
// A bearer token (from --bearer_token_file, or ACTORFLOW_BEARER_TOKEN in the environment, so that
// the secret is not in `ps`; --bearer_token still works) guards every front end: REST's
// Authorization header, gRPC's authorization metadata, the actor endpoint's requests.
// --ssl_config_file (TF Serving's SSLConfig text) puts REST and gRPC behind TLS.
// --model_config_file_poll_wait_seconds re-reads the model config file that often and serves a
// changed list (as gRPC's HandleReloadConfigRequest does); --monitoring_config_file (TF Serving's
// MonitoringConfig) turns the Prometheus metrics off or moves them.
// SIGINT / SIGTERM stop the server: it stops accepting, answers what is in flight and exits 0.

#include <algorithm>
#include <charconv>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "actors/runtime.hpp"
#include "apps/commands.hpp"
#include "apps/serving/actor_endpoint.hpp"
#include "apps/serving/config_watcher.hpp"
#include "apps/serving/grpc_server.hpp"
#include "apps/serving/http_server.hpp"
#include "apps/serving/metrics.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/serving_config.hpp"
#include "ops/parallel.hpp"

namespace af::apps {

namespace {

int usage(FILE* out) {
  std::fprintf(out,
               "usage: actorflow serve --model_name=NAME --model_base_path=DIR | --model_config_file=FILE\n"
               "         [--rest_api_port=8501] [--port=8500] [--actor_port=8502] [--bind_address=127.0.0.1]\n"
               "         [--enable_batching [--batching_parameters_file=FILE]] [--file_system_poll_wait_seconds=1]\n"
               "         [--rest_api_num_threads=0 (a thread per core)] [--rest_api_timeout_in_ms=30000] [--grpc_num_threads=0]\n"
               "         [--bearer_token_file=FILE | --bearer_token=TOKEN] [--max_body_bytes=67108864] [--tensorflow_intra_op_parallelism=0]\n"
               "         [--ssl_config_file=FILE (TLS for REST and gRPC: TF Serving's SSLConfig)]\n"
               "         [--model_config_file_poll_wait_seconds=0 (re-read --model_config_file that often; 0: never)]\n"
               "         [--monitoring_config_file=FILE (TF Serving's MonitoringConfig: metrics on/off and path)]\n"
               "         [--grpc_channel_arguments=KEY=VALUE,... (gRPC server arguments, as TF Serving passes them)]\n"
               "  the token may also come from the environment: ACTORFLOW_BEARER_TOKEN\n"
               "  TF Serving's other flags (--enable_model_warmup, --num_load_threads, ...) are accepted with a warning\n"
               "  a port of -1 picks a free one; 0 turns that front end off\n");
  return out == stderr ? 2 : 0;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "actorflow serve: %s\n", message.c_str());
  return 1;
}

// "--name=value", "--name value" and a bare "--name" (booleans) into a map; nullopt (and a
// message) for anything else.
std::optional<std::map<std::string, std::string>> parse_flags(int argc, char** argv, const std::vector<std::string>& known,
                                                              const std::vector<std::string>& booleans) {
  std::map<std::string, std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      std::fprintf(stderr, "actorflow serve: unexpected argument '%s'\n", arg.c_str());
      return std::nullopt;
    }
    arg = arg.substr(2);
    std::string value;
    const auto eq = arg.find('=');
    const bool is_bool = std::find(booleans.begin(), booleans.end(), arg.substr(0, eq)) != booleans.end();
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (is_bool) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "actorflow serve: --%s needs a value\n", arg.c_str());
      return std::nullopt;
    }
    if (std::find(known.begin(), known.end(), arg) == known.end()) {
      std::fprintf(stderr, "actorflow serve: unknown flag --%s\n", arg.c_str());
      return std::nullopt;
    }
    out[arg] = value;
  }
  return out;
}

int stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] auto written = ::write(stop_pipe[1], &byte, 1);  // async-signal-safe
}

bool install_stop_handler() {
  if (::pipe(stop_pipe) != 0) return false;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  return sigaction(SIGINT, &action, nullptr) == 0 && sigaction(SIGTERM, &action, nullptr) == 0;
}

int wait_for_stop_signal() {
  unsigned char byte = 0;
  while (::read(stop_pipe[0], &byte, 1) != 1) {
  }
  return byte;
}

// The secret every front end asks for: at most one of the flag, the file and the environment.
expected<std::string> bearer_token_of(const std::map<std::string, std::string>& flags) {
  const char* from_env = std::getenv("ACTORFLOW_BEARER_TOKEN");
  const int given = static_cast<int>(flags.count("bearer_token")) + static_cast<int>(flags.count("bearer_token_file")) +
                    (from_env && *from_env ? 1 : 0);
  if (given > 1)
    return make_error(errc::invalid_argument, "give the bearer token one way: --bearer_token_file, --bearer_token or ACTORFLOW_BEARER_TOKEN");
  if (auto it = flags.find("bearer_token"); it != flags.end()) {
    if (it->second.empty()) return make_error(errc::invalid_argument, "--bearer_token is empty");
    return it->second;
  }
  if (auto it = flags.find("bearer_token_file"); it != flags.end()) {
    std::ifstream in{it->second, std::ios::binary};
    if (!in) return make_error(errc::io_error, "--bearer_token_file: cannot open " + it->second + ": " + std::strerror(errno));
    std::string token(4098, '\0');  // read no more than a token can be: the file might be /dev/zero
    in.read(token.data(), static_cast<std::streamsize>(token.size()));
    token.resize(static_cast<std::size_t>(in.gcount()));
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    if (token.empty()) return make_error(errc::invalid_argument, "--bearer_token_file: " + it->second + " is empty");
    if (token.size() > 4096 || token.find_first_of("\r\n") != std::string::npos)
      return make_error(errc::invalid_argument, "--bearer_token_file: " + it->second + " must hold one line of at most 4096 bytes");
    return token;
  }
  return std::string{from_env ? from_env : ""};
}

// A server holds a descriptor per connection: raise the soft limit to the hard one, as servers
// do, rather than refuse connections at the default 1024.
void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) std::fprintf(stderr, "actorflow serve: cannot raise the descriptor limit: %s\n", std::strerror(errno));
}

std::optional<int64_t> parse_integer(const std::string& text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// TF Serving's flags that this server takes without acting on them, so that a launch script
// written for tensorflow_model_server keeps working: each given is named in a warning. The first
// list are its boolean flags (given bare, as `--flag`).
const std::vector<std::string> tf_serving_switches_ignored{
    "rest_api_enable_cors_support", "allow_version_labels_for_unavailable_models", "enable_per_model_batching_parameters",
    "flush_filesystem_caches", "use_alts_credentials", "enable_model_warmup", "remove_unused_fields_from_bundle_metagraph",
    "prefer_tflite_model", "enable_signature_method_name_check", "xla_cpu_compilation_enabled", "enable_profiler",
    "skip_initialize_tpu", "enable_grpc_healthcheck_service"};
const std::vector<std::string> tf_serving_flags_ignored{
    "grpc_socket_path", "num_load_threads", "num_unload_threads", "max_num_load_retries", "load_retry_interval_micros",
    "tensorflow_session_parallelism", "tensorflow_inter_op_parallelism", "tensorflow_session_config_file", "platform_config_file",
    "per_process_gpu_memory_fraction", "saved_model_tags", "num_request_iterations_for_warmup", "num_tflite_pools",
    "num_tflite_interpreters_per_pool", "thread_pool_factory_config_file", "mixed_precision"};

}  // namespace

int run_serve(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) return usage(stdout);
  std::vector<std::string> booleans{"enable_batching"};
  std::vector<std::string> known{"model_name", "model_base_path", "model_config_file", "rest_api_port", "port", "actor_port",
                                 "bind_address", "enable_batching", "batching_parameters_file",
                                 "file_system_poll_wait_seconds", "rest_api_num_threads", "rest_api_timeout_in_ms",
                                 "grpc_num_threads", "grpc_max_threads", "bearer_token", "bearer_token_file", "ssl_config_file",
                                 "max_body_bytes", "tensorflow_intra_op_parallelism", "model_config_file_poll_wait_seconds",
                                 "monitoring_config_file", "grpc_channel_arguments"};
  booleans.insert(booleans.end(), tf_serving_switches_ignored.begin(), tf_serving_switches_ignored.end());
  known.insert(known.end(), tf_serving_switches_ignored.begin(), tf_serving_switches_ignored.end());
  known.insert(known.end(), tf_serving_flags_ignored.begin(), tf_serving_flags_ignored.end());
  auto flags = parse_flags(argc, argv, known, booleans);
  if (!flags) return usage(stderr);
  for (const auto& [name, value] : *flags)
    if (std::find(tf_serving_switches_ignored.begin(), tf_serving_switches_ignored.end(), name) != tf_serving_switches_ignored.end() ||
        std::find(tf_serving_flags_ignored.begin(), tf_serving_flags_ignored.end(), name) != tf_serving_flags_ignored.end())
      std::fprintf(stderr, "actorflow serve: warning: --%s=%s is TF Serving's and is accepted without effect here\n", name.c_str(),
                   value.c_str());
  if (flags->count("grpc_max_threads") && flags->count("grpc_num_threads"))
    return fail("--grpc_max_threads (TF Serving's name) and --grpc_num_threads are one setting: give one");
  if (auto it = flags->find("grpc_max_threads"); it != flags->end()) (*flags)["grpc_num_threads"] = it->second;
  auto flag = [&](const std::string& name, const std::string& fallback = "") {
    auto it = flags->find(name);
    return it == flags->end() ? fallback : it->second;
  };
  auto integer_flag = [&](const std::string& name, int64_t fallback, int64_t lowest) -> std::optional<int64_t> {
    auto it = flags->find(name);
    if (it == flags->end()) return fallback;
    auto v = parse_integer(it->second);
    if (!v || *v < lowest) {
      std::fprintf(stderr, "actorflow serve: --%s must be an integer >= %lld, got '%s'\n", name.c_str(),
                   static_cast<long long>(lowest), it->second.c_str());
      return std::nullopt;
    }
    return v;
  };

  // Models: one from --model_name/--model_base_path, or the config file's list.
  std::vector<serving::model_config> models;
  if (flags->count("model_config_file")) {
    if (flags->count("model_base_path")) return fail("--model_config_file and --model_base_path exclude each other");
    auto read = serving::read_model_config(flag("model_config_file"));
    if (!read) return fail(read.error_value().message);
    models = std::move(*read);
    for (const auto& m : models)
      for (const auto& field : m.ignored_fields)
        std::fprintf(stderr, "actorflow serve: warning: model '%s': %s in %s is accepted without effect here\n", m.name.c_str(),
                     field.c_str(), flag("model_config_file").c_str());
  } else {
    if (!flags->count("model_base_path")) return fail("give --model_base_path (with --model_name) or --model_config_file");
    models.push_back({.name = flag("model_name", "default"), .base_path = flag("model_base_path")});
  }

  serving::server_options options;
  options.enable_batching = flag("enable_batching", "false") == "true";
  if (flags->count("batching_parameters_file")) {
    if (!options.enable_batching) return fail("--batching_parameters_file needs --enable_batching");
    auto params = serving::read_batching_parameters(flag("batching_parameters_file"));
    if (!params) return fail(params.error_value().message);
    options.batching = std::move(*params);
  }
  const auto poll = integer_flag("file_system_poll_wait_seconds", 1, 0);
  const auto config_poll = integer_flag("model_config_file_poll_wait_seconds", 0, 0);
  if (config_poll && *config_poll > 0 && !flags->count("model_config_file"))
    return fail("--model_config_file_poll_wait_seconds needs --model_config_file");
  // Metrics at TF Serving's path unless a --monitoring_config_file says otherwise (TF Serving
  // serves none without one; this server's have always been on).
  std::string metrics_path = "/monitoring/prometheus/metrics";
  if (flags->count("monitoring_config_file")) {
    auto read = serving::read_monitoring_config(flag("monitoring_config_file"));
    if (!read) return fail(read.error_value().message);
    metrics_path = std::move(*read);
  }
  auto channel_arguments = serving::parse_channel_arguments(flag("grpc_channel_arguments"));
  if (!channel_arguments) return fail("--grpc_channel_arguments: " + channel_arguments.error_value().message);
  const auto rest_port = integer_flag("rest_api_port", 0, -1);
  const auto grpc_port = integer_flag("port", 8500, -1);
  const auto actor_port = integer_flag("actor_port", 0, -1);
  // 0, the default: one per core, as TF Serving sizes its REST threads by the CPUs it sees (a fixed
  // two left most of a larger machine to the kernels alone).
  const auto rest_threads = integer_flag("rest_api_num_threads", 0, 0);
  const auto grpc_threads = integer_flag("grpc_num_threads", 0, 0);
  const auto rest_timeout = integer_flag("rest_api_timeout_in_ms", 30000, 0);
  const auto body_limit = integer_flag("max_body_bytes", 64 << 20, 1);
  // As in TF Serving: threads one op of a model call may split its work over; 0 takes every core.
  const auto intra_op = integer_flag("tensorflow_intra_op_parallelism", 0, 0);
  if (!poll || !config_poll || !rest_port || !grpc_port || !actor_port || !rest_threads || !grpc_threads || !rest_timeout || !body_limit || !intra_op)
    return 2;
  if (*rest_port > 65535 || *grpc_port > 65535 || *actor_port > 65535) return fail("ports go up to 65535");
  if (*rest_port == 0 && *grpc_port == 0 && *actor_port == 0)
    return fail("every front end is off: give --rest_api_port, --port or --actor_port");
  options.poll_interval = std::chrono::seconds(*poll);
  const std::string address = flag("bind_address", "127.0.0.1");
  auto token = bearer_token_of(*flags);
  if (!token) return fail(token.error_value().message);
  std::optional<serving::tls_config> tls;
  if (flags->count("ssl_config_file")) {
    auto read = serving::read_ssl_config(flag("ssl_config_file"));
    if (!read) return fail(read.error_value().message);
    tls = std::move(*read);
  }
  raise_descriptor_limit();

  // SIGINT / SIGTERM may land on any thread (OpenBLAS starts its threads before main): a handler
  // writes the signal to a pipe that this thread waits on.
  if (!install_stop_handler()) return fail("cannot install the SIGINT/SIGTERM handler");

  runtime_options runtime_config;
  runtime_config.network = *actor_port != 0;
  runtime_config.kernel_threads = static_cast<int>(std::min<int64_t>(*intra_op, 1024));
  // Idle CAF workers nap at once (actors/runtime.hpp): a server's messages come from its front-end
  // threads, which wake a napping worker, and polling would take the cores those threads need.
  runtime_config.idle_polls = 1;
  runtime rt{runtime_config};
  std::printf("serving: a model call's kernels use up to %d threads\n", thread_budget());
  const auto per_core = [](int64_t n) {
    return n > 0 ? static_cast<std::size_t>(std::min<int64_t>(n, 1024)) : std::size_t{std::max(1u, std::thread::hardware_concurrency())};
  };
  const std::size_t rest_thread_count = per_core(*rest_threads), grpc_thread_count = per_core(*grpc_threads);
  auto metrics = std::make_shared<serving::serving_metrics>();
  auto server = serving::model_server::start(rt, models, options, metrics);
  if (!server) return fail(server.error_value().message);
  for (const auto& name : (*server)->model_names()) {
    auto status = (*server)->status(name, std::nullopt);
    std::string versions;
    for (const auto& v : *status)
      versions += (versions.empty() ? "" : ", ") + std::to_string(v.version) + " " + serving::to_string(v.state);
    std::printf("serving: model '%s': %s\n", name.c_str(), versions.empty() ? "no version yet" : versions.c_str());
  }

  std::unique_ptr<serving::http_server> rest;
  if (*rest_port != 0) {
    serving::http_options http{.address = address,
                               .port = static_cast<uint16_t>(*rest_port < 0 ? 0 : *rest_port),
                               .threads = rest_thread_count,
                               .max_body_bytes = static_cast<std::size_t>(*body_limit),
                               .request_timeout = std::chrono::milliseconds(*rest_timeout),
                               .bearer_token = *token,
                               .tls = tls,
                               .metrics_path = metrics_path};
    auto started = serving::http_server::start(**server, metrics, http);
    if (!started) return fail(started.error_value().message);
    rest = std::move(*started);
  }
  std::unique_ptr<serving::grpc_server> grpc;
  if (*grpc_port != 0) {
    const std::string where = address + ":" + std::to_string(*grpc_port < 0 ? 0 : *grpc_port);
    auto started = serving::grpc_server::start(**server, where,
                                               {.threads = grpc_thread_count,
                                                .max_message_bytes = static_cast<std::size_t>(*body_limit),
                                                .bearer_token = *token,
                                                .tls = tls,
                                                .channel_arguments = *channel_arguments});
    if (!started) return fail(started.error_value().message);
    grpc = std::move(*started);
  }
  std::unique_ptr<serving::actor_endpoint> actors;
  if (*actor_port != 0) {
    auto started = serving::actor_endpoint::start(rt, **server, address, static_cast<uint16_t>(*actor_port < 0 ? 0 : *actor_port), *token);
    if (!started) return fail(started.error_value().message);
    actors = std::move(*started);
  }
  std::unique_ptr<serving::model_config_watcher> config_watcher;
  if (*config_poll > 0)
    config_watcher = std::make_unique<serving::model_config_watcher>(
        **server, flag("model_config_file"), models, std::chrono::seconds(*config_poll), [](const std::string& line) {
          std::fprintf(stderr, "%s\n", line.c_str());
        });
  if (rest) std::printf("serving: metrics %s\n", metrics_path.empty() ? "off" : ("at " + metrics_path).c_str());
  std::printf("serving: front-end threads: REST %zu, gRPC %zu\n", rest ? rest_thread_count : 0, grpc ? grpc_thread_count : 0);
  std::printf("serving: ready rest=%d grpc=%d actor=%d\n", rest ? rest->port() : 0, grpc ? grpc->port() : 0,
              actors ? actors->port() : 0);
  std::fflush(stdout);

  const int received = wait_for_stop_signal();
  std::printf("serving: %s, stopping\n", received == SIGINT ? "SIGINT" : "SIGTERM");
  config_watcher.reset();
  actors.reset();
  grpc.reset();
  rest.reset();
  server->reset();
  return 0;
}

}  // namespace af::apps
