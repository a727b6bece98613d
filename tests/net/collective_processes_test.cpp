// A collective ring spanning processes (actors/collectives.hpp, ring_options::across): each
// "process" here is a runtime of its own on a thread of this test, joined to the others through the
// real rendezvous and the real links (shared memory or TCP), so the sums, the handshake's refusals
// and a peer leaving are checked end to end; tests/strategies/mirrored_processes_test.cpp runs real
// processes. The link's header checks get random bytes.

#include <catch2/catch.hpp>

#include <sys/socket.h>

#include <chrono>
#include <optional>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/collective_link.hpp"
#include "actors/collectives.hpp"
#include "actors/remote_socket.hpp"
#include "actors/runtime.hpp"
#include "ops/random.hpp"

using namespace af;
using namespace af::collectives;
using namespace std::chrono_literals;
using Catch::Contains;

namespace {

std::string free_rendezvous() {
  uint16_t port = 0;
  auto listener = net::listen_tcp("127.0.0.1", 0, port);
  REQUIRE(listener);
  return "127.0.0.1:" + std::to_string(port);
}

ring_options options_for(int ranks, int process, int processes, const std::string& rendezvous, link_transport transport) {
  return {.ranks = ranks, .timeout = 20000ms, .name = "test ring",
          .across = {.process = process, .processes = processes, .rendezvous = rendezvous, .token = "secret-7",
                     .transport = transport, .shared_memory_bytes = 256 << 10, .connect_timeout = 20000ms}};
}

// Runs `body(process, ring)` in every process at once, each with its own runtime and ring.
template <class Body>
void in_every_process(int ranks, int processes, link_transport transport, Body body) {
  const std::string rendezvous = free_rendezvous();
  std::vector<std::thread> threads;
  std::vector<std::string> failures(static_cast<std::size_t>(processes));
  for (int p = 0; p < processes; ++p)
    threads.emplace_back([&, p] {
      runtime rt{{.scheduler_threads = 1}};
      auto ring = ring_group::start(rt, options_for(ranks, p, processes, rendezvous, transport));
      if (!ring) {
        failures[static_cast<std::size_t>(p)] = ring.error_value().message;
        return;
      }
      body(p, *ring);
    });
  for (auto& t : threads) t.join();
  for (int p = 0; p < processes; ++p) {
    INFO("process " << p << " could not join: " << failures[static_cast<std::size_t>(p)]);
    CHECK(failures[static_cast<std::size_t>(p)].empty());
  }
}

tensor values_of(int rank, int64_t n, uint64_t step) { return random_normal({n}, 1000 * step + static_cast<uint64_t>(rank)).value(); }

}  // namespace

TEST_CASE("a ring across 2 or 3 processes sums as one process does, over shared memory and over TCP", "[net][collectives]") {
  struct layout {
    int ranks, processes;
  };
  for (auto transport : {link_transport::shared_memory, link_transport::tcp})
    for (layout l : {layout{2, 2}, layout{4, 2}, layout{3, 3}}) {
      INFO(l.ranks << " ranks in " << l.processes << " processes, " << (transport == link_transport::tcp ? "tcp" : "shared memory"));
      const std::vector<int64_t> sizes{0, 3, 1000, 100003, 600000};  // none, ragged, doubling, ring, larger than the shared ring
      std::vector<std::vector<std::vector<float>>> got(static_cast<std::size_t>(l.ranks));  // [rank][size]
      std::vector<std::string> transports(static_cast<std::size_t>(l.processes)), errors(static_cast<std::size_t>(l.ranks));
      in_every_process(l.ranks, l.processes, transport, [&](int p, const ring_group& ring) {
        transports[static_cast<std::size_t>(p)] = ring.transport_to((p + 1) % l.processes);
        std::vector<std::thread> callers;
        for (int r = ring.first_local_rank(); r < ring.first_local_rank() + ring.local_ranks(); ++r)
          callers.emplace_back([&, r] {  // no REQUIRE off the test's thread: errors are checked after
            for (std::size_t s = 0; s < sizes.size(); ++s) {
              auto sum = ring.all_reduce(r, {.step = s, .bucket = 0}, values_of(r, sizes[s], s));
              if (!sum) {
                errors[static_cast<std::size_t>(r)] = sum.error_value().to_string();
                return;
              }
              got[static_cast<std::size_t>(r)].emplace_back(sum->data<float>(), sum->data<float>() + sum->numel());
            }
          });
        for (auto& t : callers) t.join();
      });
      for (const auto& e : errors) {
        INFO(e);
        REQUIRE(e.empty());
      }
      for (const auto& t : transports) CHECK(t == (transport == link_transport::tcp ? "tcp" : "shared memory"));
      for (std::size_t s = 0; s < sizes.size(); ++s) {
        std::vector<double> want(static_cast<std::size_t>(sizes[s]), 0.0);
        for (int r = 0; r < l.ranks; ++r) {
          auto v = values_of(r, sizes[s], s);
          for (int64_t i = 0; i < sizes[s]; ++i) want[static_cast<std::size_t>(i)] += v.data<float>()[i];
        }
        for (int r = 0; r < l.ranks; ++r) {
          const auto& mine = got[static_cast<std::size_t>(r)];
          REQUIRE(mine.size() == sizes.size());
          REQUIRE(mine[s].size() == want.size());
          std::size_t off = 0;
          for (std::size_t i = 0; i < want.size(); ++i) off += std::abs(mine[s][i] - want[i]) > 1e-4 * (1.0 + std::abs(want[i]));
          CHECK(off == 0);
          CHECK(mine[s] == got[0][s]);  // the same bits on every rank
        }
      }
    }
}

// The bodies below run on the "processes'" threads, where Catch's assertions must not be used:
// they record what happened, and the test's thread checks it after.

TEST_CASE("all_gather and broadcast across processes give every rank the same tensors", "[net][collectives]") {
  std::vector<std::vector<float>> gathered(2), broadcast(2);
  std::vector<std::string> transports(2), errors(2);
  in_every_process(2, 2, link_transport::automatic, [&](int p, const ring_group& ring) {
    const auto i = static_cast<std::size_t>(p);
    transports[i] = ring.transport_to(1 - p);
    auto g = ring.all_gather(p, {.step = 1}, tensor::full({3}, p + 1.0, dtype::f32).value());
    auto b = ring.broadcast(p, 1, {.step = 2}, tensor::full({5}, p == 1 ? 7.0 : 0.0, dtype::f32).value());
    if (!g || !b) {
      errors[i] = (g ? b.error_value() : g.error_value()).to_string();
      return;
    }
    if (g->shape() != af::shape{2, 3}) errors[i] = "all_gather's shape is " + to_string(g->shape());
    gathered[i].assign(g->data<float>(), g->data<float>() + g->numel());
    broadcast[i].assign(b->data<float>(), b->data<float>() + b->numel());
  });
  for (std::size_t p = 0; p < 2; ++p) {
    INFO("process " << p << ": " << errors[p]);
    CHECK(errors[p].empty());
    CHECK(transports[p] == "shared memory");  // both on this host
    CHECK(gathered[p] == std::vector<float>{1, 1, 1, 2, 2, 2});
    CHECK(broadcast[p] == std::vector<float>(5, 7.0f));
  }
}

TEST_CASE("calls that do not line up across processes fail on every rank, naming both", "[net][collectives]") {
  std::vector<std::string> errors(2);
  in_every_process(2, 2, link_transport::automatic, [&](int p, const ring_group& ring) {
    auto sum = ring.all_reduce(p, {.step = p == 0 ? 1u : 2u}, tensor::full({100000}, 1.0, dtype::f32).value());
    errors[static_cast<std::size_t>(p)] = sum ? "it succeeded" : sum.error_value().message;
  });
  for (const auto& e : errors) {
    CHECK_THAT(e, Contains("step 1") && Contains("step 2") && Contains("rank 0") && Contains("rank 1"));
  }
}

TEST_CASE("a process that leaves fails the others' waiting call at once, naming it", "[net][collectives]") {
  std::optional<error> failure;
  std::chrono::milliseconds waited{0};
  in_every_process(2, 2, link_transport::automatic, [&](int p, const ring_group& ring) {
    if (p == 1) return;  // joins, then leaves without calling: its ring and runtime go away
    const auto start = std::chrono::steady_clock::now();
    auto sum = ring.all_reduce(0, {.step = 0}, tensor::full({1000}, 1.0, dtype::f32).value());
    waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (!sum) failure = sum.error_value();
  });
  REQUIRE(failure);
  CHECK(failure->code == errc::peer_down);
  CHECK_THAT(failure->message, Contains("process 1"));
  CHECK(waited < 5000ms);  // not the 20 s timeout
}

TEST_CASE("a rank in another process that never calls is named when the call times out", "[net][collectives]") {
  const std::string rendezvous = free_rendezvous();
  std::atomic<bool> done{false};
  std::string idle_error;
  std::thread idle([&] {
    runtime rt{{.scheduler_threads = 1}};
    auto o = options_for(2, 1, 2, rendezvous, link_transport::automatic);
    o.timeout = 300ms;
    auto ring = ring_group::start(rt, o);
    if (!ring) idle_error = ring.error_value().to_string();
    while (!done) std::this_thread::sleep_for(10ms);  // joined, but never calls
  });
  expected<tensor> sum = make_error(errc::cancelled, "not called");
  {
    runtime rt{{.scheduler_threads = 1}};
    auto o = options_for(2, 0, 2, rendezvous, link_transport::automatic);
    o.timeout = 300ms;
    auto ring = ring_group::start(rt, o);
    if (ring) sum = ring->all_reduce(0, {.step = 4}, tensor::full({10}, 1.0, dtype::f32).value());
  }
  done = true;
  idle.join();
  CHECK(idle_error.empty());
  REQUIRE_FALSE(sum);
  CHECK(sum.error_value().code == errc::timeout);
  CHECK_THAT(sum.error_value().message, Contains("rank(s) 1 did not arrive"));
}

TEST_CASE("joining is refused with a reason for a wrong token, and strangers do not stop the group forming", "[net][collectives]") {
  const std::string rendezvous = free_rendezvous();
  const auto port = static_cast<uint16_t>(std::stoi(rendezvous.substr(rendezvous.rfind(':') + 1)));
  std::string wrong_token_error = "the impostor joined";
  std::thread impostor([&] {
    runtime rt{{.scheduler_threads = 1}};
    auto o = options_for(2, 1, 2, rendezvous, link_transport::automatic);
    o.across.token = "guessed";
    auto ring = ring_group::start(rt, o);
    if (!ring) wrong_token_error = ring.error_value().message;
  });
  std::thread stranger([&] {
    // Bytes that are not a hello, sent as soon as the rendezvous listens.
    for (int tries = 0; tries < 200; ++tries) {
      auto fd = net::connect_tcp("127.0.0.1", port);
      if (fd) {
        const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        (void)net::write_all(fd->get(), junk, sizeof junk);
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
  });
  // Process 0 waits for its group while the impostor and the stranger knock.
  expected<tensor> sum = make_error(errc::cancelled, "not called");
  std::thread zero([&] {
    runtime rt{{.scheduler_threads = 1}};
    auto ring = ring_group::start(rt, options_for(2, 0, 2, rendezvous, link_transport::automatic));
    if (!ring) sum = ring.error_value();
    else sum = ring->all_reduce(0, {}, tensor::full({4}, 1.0, dtype::f32).value());
  });
  impostor.join();
  stranger.join();
  CHECK_THAT(wrong_token_error, Contains("token"));
  expected<tensor> member_sum = make_error(errc::cancelled, "not called");
  {  // the real process 1, after both were turned away
    runtime rt{{.scheduler_threads = 1}};
    auto ring = ring_group::start(rt, options_for(2, 1, 2, rendezvous, link_transport::automatic));
    if (!ring) member_sum = ring.error_value();
    else member_sum = ring->all_reduce(1, {}, tensor::full({4}, 2.0, dtype::f32).value());
  }
  zero.join();
  REQUIRE(member_sum);
  REQUIRE(sum);
  CHECK(sum->data<float>()[0] == 3.0f);
}

TEST_CASE("a silent stranger on the rendezvous port delays the group by the handshake limit at most", "[net][collectives]") {
  const std::string rendezvous = free_rendezvous();
  const auto port = static_cast<uint16_t>(std::stoi(rendezvous.substr(rendezvous.rfind(':') + 1)));
  std::string zero_error = "did not finish";
  const auto start = std::chrono::steady_clock::now();
  std::thread zero([&] {
    runtime rt{{.scheduler_threads = 1}};
    auto ring = ring_group::start(rt, options_for(2, 0, 2, rendezvous, link_transport::automatic));
    zero_error = ring ? "" : ring.error_value().message;
  });
  expected<net::socket_fd> silent = make_error(errc::cancelled, "not connected");
  for (int tries = 0; tries < 200 && !silent; ++tries) {
    silent = net::connect_tcp("127.0.0.1", port);  // connects first and never says a word
    if (!silent) std::this_thread::sleep_for(10ms);
  }
  REQUIRE(silent);
  std::string one_error = "did not finish";
  {
    runtime rt{{.scheduler_threads = 1}};
    auto ring = ring_group::start(rt, options_for(2, 1, 2, rendezvous, link_transport::automatic));
    one_error = ring ? "" : ring.error_value().message;
  }
  zero.join();
  CHECK(zero_error.empty());
  CHECK(one_error.empty());
  CHECK(std::chrono::steady_clock::now() - start < 12s);  // the stranger's 5 s, not the 20 s connect timeout
}

TEST_CASE("chunks from another process that do not fit the call fail it by name, never write past it", "[net][collectives]") {
  struct hostile {
    const char* what;
    uint64_t seq;
    int32_t round;
    uint64_t elements;
  };
  // 2 ranks, 100000 floats: the ring's round 0 chunk from rank 1 holds 50000.
  for (hostile h : {hostile{"a chunk twice too long", 0, 0, 100000}, hostile{"a chunk too short", 0, 0, 10},
                    hostile{"a round beyond the plan", 0, 2, 50000}, hostile{"a call far ahead", 1000, 0, 50000}}) {
    INFO(h.what);
    const std::string rendezvous = free_rendezvous();
    expected<tensor> sum = make_error(errc::cancelled, "not called");
    std::thread zero([&] {
      runtime rt{{.scheduler_threads = 1}};
      auto o = options_for(2, 0, 2, rendezvous, link_transport::automatic);
      o.doubling_max_bytes = 0;  // the ring, whose chunks are halves
      auto ring = ring_group::start(rt, o);
      if (!ring) sum = ring.error_value();
      else sum = ring->all_reduce(0, {.step = 3}, tensor::full({100000}, 1.0, dtype::f32).value());
    });
    // This thread is process 1: it joins through the real handshake, then writes what it likes.
    mesh::mesh_options m;
    m.group = {2, 2, 1};
    m.name = "test ring", m.token = "secret-7";
    m.rendezvous_host = "127.0.0.1";
    m.rendezvous_port = static_cast<uint16_t>(std::stoi(rendezvous.substr(rendezvous.rfind(':') + 1)));
    m.bind_host = "127.0.0.1";
    m.shared_memory_bytes = 256 << 10;
    m.connect_timeout = 20000ms;
    std::atomic<bool> stop{false};
    auto links = mesh::connect(m, stop);
    REQUIRE(links);
    mesh::wire_header w;
    w.magic = mesh::wire_magic, w.version = mesh::wire_version, w.type = static_cast<uint16_t>(mesh::message_type::chunk);
    w.to_rank = 0, w.from_rank = 1, w.seq = h.seq, w.step = 3, w.kind = 0, w.dtype = static_cast<int32_t>(dtype::f32);
    w.numel = 100000, w.round = h.round, w.payload_bytes = h.elements * sizeof(float);
    const std::vector<float> payload(h.elements, 2.0f);
    REQUIRE((*links)[0]->write(w, payload.data()));
    zero.join();
    REQUIRE_FALSE(sum);
    CHECK(sum.error_value().code == errc::protocol_violation);
    CHECK_THAT(sum.error_value().message, Contains("rank 0 got a chunk"));
  }
}

TEST_CASE("a ring across processes refuses options that cannot work, by name", "[net][collectives]") {
  runtime rt{{.scheduler_threads = 1}};
  auto o = options_for(3, 0, 2, "127.0.0.1:1", link_transport::automatic);
  CHECK_THAT(ring_group::start(rt, o).error_value().message, Contains("equal share"));
  o = options_for(2, 0, 2, "127.0.0.1", link_transport::automatic);
  CHECK_THAT(ring_group::start(rt, o).error_value().message, Contains("host:port"));
  o = options_for(2, 0, 2, "127.0.0.1:1", link_transport::automatic);
  o.across.token.clear();
  if (!std::getenv("AF_COLLECTIVE_TOKEN")) CHECK_THAT(ring_group::start(rt, o).error_value().message, Contains("token"));
  o = options_for(2, 1, 2, "127.0.0.1:1", link_transport::automatic);  // nobody listens there
  o.across.connect_timeout = 200ms;
  auto lonely = ring_group::start(rt, o);
  REQUIRE_FALSE(lonely);
  CHECK_THAT(lonely.error_value().message, Contains("127.0.0.1:1"));
}

TEST_CASE("a link's header from another process is checked field by field before anything is allocated", "[net][collectives]") {
  const mesh::group_shape group{4, 2, 0};  // this process owns ranks 0 and 1; the peer is process 1
  mesh::wire_header good;
  good.magic = mesh::wire_magic, good.version = mesh::wire_version, good.type = static_cast<uint16_t>(mesh::message_type::chunk);
  good.to_rank = 1, good.from_rank = 2, good.kind = 0, good.dtype = static_cast<int32_t>(dtype::f32), good.numel = 100;
  good.round = 1, good.payload_bytes = 200;
  CHECK_FALSE(mesh::check_header(good, group, 1, 1 << 20));
  auto with = [&](auto change) {
    auto h = good;
    change(h);
    return mesh::check_header(h, group, 1, 1 << 20);
  };
  CHECK_THAT(with([](auto& h) { h.magic = 0; }).message, Contains("magic"));
  CHECK_THAT(with([](auto& h) { h.to_rank = 2; }).message, Contains("to_rank 2"));
  CHECK_THAT(with([](auto& h) { h.from_rank = 0; }).message, Contains("from_rank 0"));
  CHECK_THAT(with([](auto& h) { h.dtype = 9; }).message, Contains("element type"));
  CHECK_THAT(with([](auto& h) { h.payload_bytes = 201; }).message, Contains("whole elements"));
  CHECK_THAT(with([](auto& h) { h.payload_bytes = 404; }).message, Contains("for a call of 100"));
  CHECK_THAT(with([](auto& h) { h.numel = 1 << 30, h.payload_bytes = uint64_t{1} << 31; }).message, Contains("exceeds the limit"));
  CHECK_THAT(with([](auto& h) { h.type = 2, h.payload_bytes = 1 << 20; }).message, Contains("abort text"));

  // Random bytes and single-field corruptions through a real link: each read is a header that
  // passes every check, or malformed_input; never a crash, an allocation or a hang.
  std::mt19937_64 rng{7};
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    auto reader = mesh::make_tcp_link(fds[0], 1, 1000ms);
    auto h = good;
    auto* bytes = reinterpret_cast<unsigned char*>(&h);
    if (i % 2) {
      for (std::size_t b = 0; b < sizeof h; ++b) bytes[b] = static_cast<unsigned char>(rng());
    } else {
      bytes[rng() % sizeof h] = static_cast<unsigned char>(rng());
    }
    REQUIRE(net::write_all(fds[1], &h, sizeof h));
    auto read = mesh::read_header(*reader, group, 1 << 20);
    ::close(fds[1]);
    if (!read) {
      CHECK(read.error_value().code == errc::malformed_input);
      ++refused;
    } else {
      CHECK(read->payload_bytes <= (1u << 20));
    }
  }
  CHECK(refused > 10000);
}
