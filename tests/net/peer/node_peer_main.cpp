// The other process of the [net] tests: a tensor receiver or sender driven by the test through
// argv, reporting on stdout one line per event ("port P", "tensor I CHECKSUM", "end N", "done N",
// "error TEXT"). Tests kill it with SIGKILL to play a dead peer.
//
//   test_net_peer receive [--window W] [--hold]
//   test_net_peer send PORT [--count N] [--transport tcp|caf] [--pause-after K]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "../tensor_patterns.hpp"
#include "actors/remote_node.hpp"

namespace {

const char* option(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

bool flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Waiting to be killed; the bound keeps a forgotten peer from living forever.
void linger() { std::this_thread::sleep_for(std::chrono::seconds(120)); }

af::runtime_options node_options() {
  return {.scheduler_threads = 2, .network = true, .heartbeat_interval_ms = 1000, .connection_timeout_ms = 60000};
}

// Sanitizer builds on a loaded two-core machine move 4 MiB tensors slowly; the peer checks content,
// not speed, so it waits far longer than the library default.
af::remote_options patient_options() {
  af::remote_options options;
  options.request_timeout = std::chrono::seconds(60);
  return options;
}

int receive(int argc, char** argv) {
  af::runtime rt{node_options()};
  auto options = patient_options();
  options.window = static_cast<uint32_t>(std::atoi(option(argc, argv, "--window", "4")));
  auto rx = af::remote_receiver::listen(rt, 0, options);
  if (!rx) return say("error " + rx.error_value().to_string()), 1;
  say("port " + std::to_string(rx->port()));
  if (flag(argc, argv, "--hold")) return linger(), 0;
  for (uint64_t i = 0;; ++i) {
    auto t = rx->next(std::chrono::seconds(60));
    if (!t) return say("error " + t.error_value().to_string()), 1;
    if (!*t) return say("end " + std::to_string(i)), 0;
    say("tensor " + std::to_string(i) + " " + std::to_string(af::test::checksum(**t)));
  }
}

int send(int argc, char** argv) {
  if (argc < 3) return say("error usage: send PORT"), 2;
  af::runtime rt{node_options()};
  auto options = patient_options();
  options.transport = std::strcmp(option(argc, argv, "--transport", "tcp"), "caf") == 0
                          ? af::bulk_transport::caf_messages
                          : af::bulk_transport::tcp_socket;
  const auto port = static_cast<uint16_t>(std::atoi(argv[2]));
  const uint64_t count = std::strtoull(option(argc, argv, "--count", "40"), nullptr, 10);
  const uint64_t pause_after = std::strtoull(option(argc, argv, "--pause-after", "0"), nullptr, 10);
  auto tx = af::remote_sender::connect(rt, "127.0.0.1", port, options);
  if (!tx) return say("error " + tx.error_value().to_string()), 1;
  for (uint64_t i = 0; i < count; ++i) {
    if (pause_after > 0 && i == pause_after) return say("paused " + std::to_string(i)), linger(), 0;
    if (auto ok = tx->send(af::test::pattern_tensor(i)); !ok) return say("error " + ok.error_value().to_string()), 1;
  }
  if (auto ok = tx->finish(); !ok) return say("error " + ok.error_value().to_string()), 1;
  say("done " + std::to_string(count));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "receive") == 0) return receive(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "send") == 0) return send(argc, argv);
  std::fprintf(stderr, "usage: test_net_peer receive [--window W] [--hold] | send PORT [--count N] "
                       "[--transport tcp|caf] [--pause-after K]\n");
  return 2;
}
