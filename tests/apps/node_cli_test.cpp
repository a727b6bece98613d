// `actorflow node receive` and `actorflow node send` as two processes on 127.0.0.1, as the README
// shows them. The receiver is given port 0 and says which free port it got, so parallel test runs
// never collide; every wait is bounded.

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>

#include "../support/scratch_dir.hpp"
#include "cli_test_support.hpp"

using namespace af::testing;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {

/// Starts `actorflow node receive 0 extra...` and returns the port from its first line.
std::string start_receiver(child_process& receiver) {
  REQUIRE(receiver.started());
  auto line = receiver.read_line(30s);
  REQUIRE(line);
  std::smatch m;
  REQUIRE(std::regex_match(*line, m, std::regex{R"(listening on 127\.0\.0\.1:(\d+) \(window 4\))"}));
  return m[1];
}

std::string checksum_in(const std::string& text) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex{"checksum ([0-9a-f]{16})"})) return "no checksum";
  return m[1];
}

/// A port on 127.0.0.1 that nobody listens on while the returned socket stays open (bound, not
/// listening: connecting is refused).
struct closed_port {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  uint16_t port = 0;
  closed_port() {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port = ntohs(addr.sin_port);
  }
  ~closed_port() { ::close(fd); }
};

}  // namespace

TEST_CASE("actorflow node send delivers every tensor to node receive in another process", "[cli][node]") {
  scratch_dir cwd{"af_cli_node"};
  child_process receiver{{AF_ACTORFLOW_PATH, "node", "receive", "0"}, cwd.path};
  const std::string port = start_receiver(receiver);

  auto sent = actorflow({"node", "send", "127.0.0.1", port, "--count", "20", "--shape", "1024,1024"}, cwd.path);
  INFO(describe(sent));
  CHECK(sent.exit_code == 0);
  CHECK_THAT(sent.out, Contains("sent 20 tensors (f32 [1024,1024]) to 127.0.0.1:" + port + " over tcp in ") &&
                           Contains("window 4, max in flight "));

  auto received = receiver.finish(30s);
  INFO(describe(received));
  CHECK(received.exit_code == 0);
  CHECK_THAT(received.out, Contains("received 20 tensors, 83886080 bytes in "));  // 20 x 1024 x 1024 x 4
  // Both ends fold a digest of every payload into one checksum: the same bytes crossed.
  CHECK(checksum_in(received.out) == checksum_in(sent.out));
  CHECK(checksum_in(sent.out) != "no checksum");
}

TEST_CASE("actorflow node send fails with peer_down naming host:port when the receiver dies", "[cli][node]") {
  scratch_dir cwd{"af_cli_node"};
  // --verbose prints a line per tensor: the first one says the stream is flowing.
  child_process receiver{{AF_ACTORFLOW_PATH, "node", "receive", "0", "--verbose"}, cwd.path};
  const std::string port = start_receiver(receiver);
  child_process sender{{AF_ACTORFLOW_PATH, "node", "send", "127.0.0.1", port, "--count", "1000000", "--shape", "256"},
                       cwd.path};
  REQUIRE(receiver.read_line(30s));
  receiver.kill();
  auto sent = sender.finish(30s);
  INFO(describe(sent));
  CHECK(sent.exit_code == 1);
  CHECK_FALSE(sent.timed_out);
  CHECK_THAT(sent.err, Contains("peer_down") && Contains("127.0.0.1:" + port));
}

TEST_CASE("actorflow node send to a port nobody listens on, and bad arguments, fail with a clear message",
          "[cli][node]") {
  scratch_dir cwd{"af_cli_node"};
  closed_port nobody;
  auto refused = actorflow({"node", "send", "127.0.0.1", std::to_string(nobody.port), "--count", "2"}, cwd.path, 30s);
  INFO(describe(refused));
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Contains("cannot connect to 127.0.0.1:" + std::to_string(nobody.port)));

  auto bad_shape = actorflow({"node", "send", "127.0.0.1", "5555", "--shape", "3,x"}, cwd.path);
  CHECK(bad_shape.exit_code == 1);
  CHECK_THAT(bad_shape.err, Contains("--shape: 'x' is not a dimension"));
  auto bad_port = actorflow({"node", "send", "127.0.0.1", "port"}, cwd.path);
  CHECK(bad_port.exit_code == 2);
  CHECK_THAT(bad_port.err, Contains("usage: actorflow node send HOST PORT"));
  auto no_action = actorflow({"node"}, cwd.path);
  CHECK(no_action.exit_code == 2);
}
