#include "apps/node_commands.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "actors/remote_node.hpp"
#include "apps/commands.hpp"

namespace af::apps {

namespace {

using clock_type = std::chrono::steady_clock;

const char* option(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

bool has_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

// The i-th positional argument after the subcommand name, skipping "--opt value" pairs and flags.
const char* positional(int argc, char** argv, int index) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-' && argv[i][1] == '-') {
      if (std::strcmp(argv[i], "--verbose") != 0) ++i;
      continue;
    }
    if (index-- == 0) return argv[i];
  }
  return nullptr;
}

bool parse_port(const char* text, uint16_t& port) {
  if (!text) return false;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 65535) return false;
  port = static_cast<uint16_t>(value);
  return true;
}

expected<shape> parse_shape(std::string_view text) {
  shape dims;
  while (!text.empty()) {
    auto comma = text.find(',');
    auto part = std::string(text.substr(0, comma));
    char* end = nullptr;
    long long d = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || d < 0)
      return make_error(errc::invalid_argument, "--shape: '" + part + "' is not a dimension");
    dims.push_back(d);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return dims;
}

// A digest of one tensor's payload, 8 bytes at a time (a byte-wise hash would cap the receiver
// below the link speed), folded into a stream checksum so both ends can compare what crossed.
uint64_t digest(const tensor& t) {
  uint64_t h = 1469598103934665603ULL ^ t.nbytes();
  const auto* c = static_cast<const unsigned char*>(t.raw_data());
  std::size_t k = 0;
  for (; k + 8 <= t.nbytes(); k += 8) {
    uint64_t w;
    std::memcpy(&w, c + k, 8);
    h = (h ^ w) * 1099511628211ULL;
  }
  for (; k < t.nbytes(); ++k) h = (h ^ c[k]) * 1099511628211ULL;
  return h;
}

uint64_t fold_checksum(uint64_t stream, uint64_t tensor_digest) {
  return (stream ^ tensor_digest) * 1099511628211ULL;
}

runtime_options node_runtime() {
  // Heartbeats declare a peer dead that vanished without closing its socket (cable, frozen host).
  // The sharing scheduler: idle work-stealing workers poll for ~25 ms after each credit message and
  // take the CPU the socket threads need on small machines (bench_messaging measures both).
  return {.network = true, .heartbeat_interval_ms = 500, .connection_timeout_ms = 5000,
          .caf_args = {"--scheduler.policy=sharing"}};
}

int fail(const char* what, const error& err) {
  std::fprintf(stderr, "actorflow node %s: %s\n", what, err.to_string().c_str());
  return 1;
}

}  // namespace

int run_receive(int argc, char** argv) {
  uint16_t port = 0;
  if (!parse_port(positional(argc, argv, 0), port)) {
    std::fprintf(stderr, "usage: actorflow node receive PORT [--window W] [--verbose]\n");
    return 2;
  }
  runtime rt{node_runtime()};
  remote_options options;
  options.window = static_cast<uint32_t>(std::atoi(option(argc, argv, "--window", "4")));
  auto rx = remote_receiver::listen(rt, port, options);
  if (!rx) return fail("receive", rx.error_value());
  std::printf("listening on %s:%u (window %u)\n", options.bind_host.c_str(), rx->port(), options.window);
  std::fflush(stdout);
  const bool verbose = has_flag(argc, argv, "--verbose");
  uint64_t count = 0, bytes = 0, checksum = 1469598103934665603ULL;
  clock_type::time_point first{};
  for (;;) {
    // The first tensor may take long (nobody connected yet); later ones are bounded by the timeout.
    auto t = rx->next(count == 0 ? std::chrono::hours(24) : options.request_timeout);
    if (!t) return fail("receive", t.error_value());
    if (!*t) break;
    if (count == 0) first = clock_type::now();
    ++count;
    bytes += (*t)->nbytes();
    checksum = fold_checksum(checksum, digest(**t));
    if (verbose) std::printf("%llu: %s\n", static_cast<unsigned long long>(count), (*t)->to_string(4).c_str());
  }
  const double secs = count ? std::chrono::duration<double>(clock_type::now() - first).count() : 0.0;
  std::printf("received %llu tensors, %llu bytes in %.3f s (%.3f GB/s), checksum %016llx\n",
              static_cast<unsigned long long>(count), static_cast<unsigned long long>(bytes), secs,
              secs > 0 ? static_cast<double>(bytes) / secs / 1e9 : 0.0, static_cast<unsigned long long>(checksum));
  return 0;
}

int run_send(int argc, char** argv) {
  const char* host = positional(argc, argv, 0);
  uint16_t port = 0;
  if (!host || !parse_port(positional(argc, argv, 1), port) || port == 0) {
    std::fprintf(stderr, "usage: actorflow node send HOST PORT [--count N] [--shape 1024,1024] [--dtype f32] "
                         "[--transport tcp|caf] [--window W]\n");
    return 2;
  }
  auto dims = parse_shape(option(argc, argv, "--shape", "1024,1024"));
  if (!dims) return fail("send", dims.error_value());
  auto type = parse_dtype(option(argc, argv, "--dtype", "f32"));
  if (!type) return fail("send", type.error_value());
  const std::string_view transport = option(argc, argv, "--transport", "tcp");
  if (transport != "tcp" && transport != "caf")
    return fail("send", make_error(errc::invalid_argument, "--transport must be tcp or caf"));
  remote_options options;
  options.window = static_cast<uint32_t>(std::atoi(option(argc, argv, "--window", "4")));
  options.transport = transport == "caf" ? bulk_transport::caf_messages : bulk_transport::tcp_socket;
  const uint64_t count = std::strtoull(option(argc, argv, "--count", "100"), nullptr, 10);

  // One tensor with a recognisable pattern, sent `count` times (it is immutable once sent).
  auto filled = tensor::arange(numel(*dims), *type);
  if (!filled) return fail("send", filled.error_value());
  auto payload = filled->reshape(*dims);
  if (!payload) return fail("send", payload.error_value());

  runtime rt{node_runtime()};
  auto tx = remote_sender::connect(rt, host, port, options);
  if (!tx) return fail("send", tx.error_value());
  const auto start = clock_type::now();
  const uint64_t payload_digest = digest(*payload);
  uint64_t checksum = 1469598103934665603ULL;
  for (uint64_t i = 0; i < count; ++i) {
    if (auto ok = tx->send(*payload); !ok) return fail("send", ok.error_value());
    checksum = fold_checksum(checksum, payload_digest);
  }
  if (auto ok = tx->finish(); !ok) return fail("send", ok.error_value());
  const double secs = std::chrono::duration<double>(clock_type::now() - start).count();
  const double bytes = static_cast<double>(count) * static_cast<double>(payload->nbytes());
  auto stats = tx->stats();
  std::printf("sent %llu tensors (%s %s) to %s over %s in %.3f s: %.3f GB/s, window %u, max in flight %llu, "
              "checksum %016llx\n",
              static_cast<unsigned long long>(count), std::string(to_string(*type)).c_str(), to_string(*dims).c_str(),
              tx->peer().c_str(), std::string(transport).c_str(), secs, secs > 0 ? bytes / secs / 1e9 : 0.0,
              stats.window, static_cast<unsigned long long>(stats.max_in_flight),
              static_cast<unsigned long long>(checksum));
  return 0;
}

int run_node(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "receive") == 0) return run_receive(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "send") == 0) return run_send(argc - 1, argv + 1);
  std::fprintf(stderr,
               "usage: actorflow node receive PORT [--window W] [--verbose]\n"
               "       actorflow node send HOST PORT [--count N] [--shape 1024,1024] [--dtype f32] "
               "[--transport tcp|caf] [--window W]\n");
  return 2;
}

}  // namespace af::apps
