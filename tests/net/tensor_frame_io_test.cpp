#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <cstring>
#include <random>
#include <thread>

#include "actors/remote_socket.hpp"
#include "serialization/tensor_codec.hpp"
#include "serialization/tensor_frame.hpp"
#include "tensor_patterns.hpp"

// The data plane's frame reader on a socketpair: what arrives from the network is validated before
// anything is allocated or trusted.

namespace {

struct socket_pair {
  af::net::socket_fd a, b;
  socket_pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    a = af::net::socket_fd{fds[0]};
    b = af::net::socket_fd{fds[1]};
  }
};

af::expected<af::net::frame_read> read_after_writing(const std::string& bytes) {
  socket_pair p;
  std::thread writer([&] {
    (void)af::net::write_all(p.a.get(), bytes.data(), bytes.size());
    p.a.close();
  });
  auto got = af::net::read_tensor_frame(p.b.get(), af::cpu_allocator(), uint64_t{1} << 30);
  writer.join();
  return got;
}

}  // namespace

TEST_CASE("tensor frames cross a socket intact, then the end frame carries the count", "[net]") {
  socket_pair p;
  std::vector<af::tensor> sent;
  for (uint64_t i = 0; i < 18; ++i) sent.push_back(af::test::pattern_tensor(i));
  bool written = true;  // Catch2 assertions are not thread-safe: the writer reports back
  std::thread writer([&] {
    for (const auto& t : sent) written = written && af::net::write_tensor_frame(p.a.get(), t).has_value();
    written = written && af::net::write_end_frame(p.a.get(), sent.size()).has_value();
  });
  for (const auto& expected : sent) {
    auto got = af::net::read_tensor_frame(p.b.get(), af::cpu_allocator(), uint64_t{1} << 30);
    REQUIRE(got);
    REQUIRE_FALSE(got->end);
    CHECK(af::test::same_bytes(got->value, expected));
  }
  auto end = af::net::read_tensor_frame(p.b.get(), af::cpu_allocator(), 0);
  writer.join();
  CHECK(written);
  REQUIRE(end);
  CHECK(end->end);
  CHECK(end->end_count == sent.size());
}

TEST_CASE("bad bytes on the data connection are malformed input, never a crash", "[net]") {
  std::mt19937_64 gen(7);
  for (int round = 0; round < 200; ++round) {
    std::string noise(1 + gen() % 200, '\0');
    for (auto& c : noise) c = static_cast<char>(gen());
    if (round % 2 == 0) std::memcpy(noise.data(), "AFT1\x01\0\0\0", std::min<std::size_t>(8, noise.size()));
    auto got = read_after_writing(noise);
    REQUIRE_FALSE(got);
    const auto code = got.error_value().code;
    CHECK((code == af::errc::malformed_input || code == af::errc::unknown_dtype || code == af::errc::peer_down));
  }
  // A valid prefix with a header that lies about the payload size.
  std::string head = af::encode_tensor_frame_head(*af::tensor::empty({4}, af::dtype::f32));
  std::string liar_header = af::encode_tensor_header(af::tensor_header{af::dtype::f32, {4}, 12, {}});
  std::string liar = head.substr(0, af::frame_prefix_bytes) + liar_header;
  auto bad = read_after_writing(liar);
  REQUIRE_FALSE(bad);
  CHECK(bad.error_value().code == af::errc::malformed_input);
  CHECK(bad.error_value().message.find("payload") != std::string::npos);
}

TEST_CASE("a payload beyond the receiver's limit is rejected before allocating it", "[net]") {
  socket_pair p;
  auto t = af::test::pattern_tensor(7);  // 4 MiB
  std::string head = af::encode_tensor_frame_head(t);
  REQUIRE(af::net::write_all(p.a.get(), head.data(), head.size()));
  auto got = af::net::read_tensor_frame(p.b.get(), af::cpu_allocator(), 1 << 20);
  REQUIRE_FALSE(got);
  CHECK(got.error_value().code == af::errc::malformed_input);
  CHECK(got.error_value().message.find("exceeds the limit") != std::string::npos);
}

TEST_CASE("a connection closed mid-frame is peer_down, not a short tensor", "[net]") {
  auto t = af::test::pattern_tensor(4);
  std::string head = af::encode_tensor_frame_head(t);
  std::string partial = head + std::string(static_cast<const char*>(t.raw_data()), t.nbytes() / 2);
  auto got = read_after_writing(partial);
  REQUIRE_FALSE(got);
  CHECK(got.error_value().code == af::errc::peer_down);
  CHECK(got.error_value().message.find("closed by peer after") != std::string::npos);
}
