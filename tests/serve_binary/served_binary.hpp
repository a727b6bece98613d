#pragma once

// `actorflow serve` started as an operator starts it, on a small dense model (x: f32[-1,4] ->
// y: f32[-1,3]) with every front end on a free port and a bearer token from a file; and a raw
// socket exchange for requests no well-behaved client sends.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "../serving/serving_fixtures.hpp"
#include "../support/child_process.hpp"
#include "../support/scratch_dir.hpp"

namespace af::testing {

struct served {
  static constexpr const char* token = "s3cret-token";

  scratch_dir dir{"af_served"};
  std::unique_ptr<child_process> server;
  int rest = 0, grpc = 0, actor = 0;

  /// Starts the server with `extra` flags after the common ones, serving as "dense" the model
  /// `save` writes into a version directory (by default the small dense model, version 1), through
  /// `launcher` when one is given (a program that execs the rest of its arguments, like prlimit).
  explicit served(std::vector<std::string> extra = {},
                  const std::function<void(const std::filesystem::path&)>& save = [](const std::filesystem::path& version) {
                    save_version(version.parent_path(), 1, 7);
                  },
                  std::vector<std::string> launcher = {}) {
    save(dir.path / "models" / "dense" / "1");
    std::ofstream{dir.path / "token"} << token << "\n";
    std::vector<std::string> argv{AF_ACTORFLOW_PATH, "serve", "--model_name=dense",
                                  "--model_base_path=" + (dir.path / "models" / "dense").string(), "--rest_api_port=-1", "--port=-1",
                                  "--actor_port=-1", "--bearer_token_file=" + (dir.path / "token").string(),
                                  "--max_body_bytes=1048576", "--file_system_poll_wait_seconds=0", "--tensorflow_intra_op_parallelism=1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.begin(), launcher.begin(), launcher.end());
    server = std::make_unique<child_process>(std::move(argv), dir.path);
    for (;;) {
      auto line = server->read_line(std::chrono::seconds(120));
      if (!line) FAIL("actorflow serve did not get ready:\n" << server->finish(std::chrono::seconds(5)).err);
      std::smatch m;
      if (std::regex_search(*line, m, std::regex{R"(serving: ready rest=(\d+) grpc=(\d+) actor=(\d+))"})) {
        rest = std::stoi(m[1]), grpc = std::stoi(m[2]), actor = std::stoi(m[3]);
        break;
      }
    }
  }

  /// The server's peak resident memory so far (VmHWM), in KiB.
  long peak_rss_kib() const {
    std::ifstream status{"/proc/" + std::to_string(server->pid()) + "/status"};
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1;
  }

  bool alive() const { return ::kill(server->pid(), 0) == 0; }

  /// SIGTERM, and the exit code it then exits with.
  int stop() {
    server->signal(SIGTERM);
    return server->finish(std::chrono::seconds(30)).exit_code;
  }
};

/// A connected TCP socket to 127.0.0.1:port, with a 10 s receive timeout.
inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  timeval quiet{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &quiet, sizeof quiet);
  return fd;
}

/// Sends `bytes` on a fresh connection and returns what the server answers before it closes (or
/// goes quiet for 10 s): for requests whose body is never sent.
inline std::string send_raw(int port, const std::string& bytes) {
  const int fd = connect_loopback(port);
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace af::testing
