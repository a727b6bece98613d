// The ring all-reduce of actors/collectives.hpp in one process: 2 and 4 ranks, each calling from a
// thread of its own as replicas do, on f32 tensors from 4 KB up, against memcpy of the same bytes
// measured in the same run.
//
//   build/bench/bench_allreduce [--quick]
//
// Figures follow nccl-tests: algorithm bandwidth = bytes / time of one all-reduce; bus bandwidth =
// algorithm bandwidth x 2(n-1)/n, the bytes each rank's link carries, comparable across ring sizes.
// memcpy_gbps is bytes copied per second by one thread (the per-rank work of the ring: adds and
// copies of received chunks, one thread per rank). Each call's input is handed over with std::move,
// as a replica hands over a fresh gradient, and summed in place. Last line: one JSON object with
// inproc{2,4}_busbw_gbps_<bytes>, inproc{2,4}_ms_<bytes>, memcpy_gbps and, for 1 MB and up,
// inproc{2,4}_busbw_vs_memcpy_min (the worst size; goal >= 0.4), and inproc1_ms_4096, a call to a
// group of one rank: what every call pays whatever its size (the caller drives its rank itself).
//
// Two processes: the program runs a copy of itself as process 1 of a ring of 2 ranks, one per
// process, and both time the same calls: procs2_ms_<bytes> and procs2_busbw_gbps_<bytes> over the
// link the ring chooses on one host (shared memory), procs2_tcp_* with the link forced to TCP, and
// tcp_gbps, one direction of a plain loopback TCP connection between two threads (64 MB in 4 MB
// writes), measured in the same run. bench/allreduce_reference.py measures Gloo (torch.distributed)
// on the same sizes and processes; scripts/figures runs both each round and reports the ratios.
//
// Scaling: the digits MLP (training/digits.hpp) trained on random batches of 1024 rows per replica,
// 2 replicas of 1 kernel thread each under mirrored_strategy against 1 replica of 1 thread (the
// model's own fused step), as samples per second: scaling_2x1_vs_1x1 (goal >= 1.7), with
// train_1x1_samples_per_s and train_2x1_samples_per_s. The machine's own ceiling, measured in the
// same run: two independent replicas, each a thread training its own model without exchanging
// anything (scaling_independent_2x1_vs_1x1; on 2 vCPUs 1.85-2). overlap_step_vs_compute: the
// mirrored step's time over that compute alone (goal <= 1.15), with buckets reduced while the
// backward pass runs; scaling_2x1_no_overlap_vs_1x1 reduces them after it. split_step_1x1_vs_fused:
// one replica through the strategy's step (gradients, then the update) against the model's fused
// step, so that the exchange's cost is told apart from the split's. The same for the digits CNN
// (256 rows per replica) with its gradients in 64 KB buckets, several per step: cnn_scaling_*,
// cnn_overlap_step_vs_compute. The steps run as fit runs them, in a feed's handler (a device
// actor), on a runtime with a trainer's idle polling.

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "actors/collectives.hpp"
#include "actors/remote_socket.hpp"
#include "actors/runtime.hpp"
#include "bench_common.hpp"
#include "ops/parallel.hpp"
#include "ops/random.hpp"
#include "ops/train/model.hpp"
#include "pipeline/feed.hpp"
#include "strategies/strategy.hpp"
#include "training/digits.hpp"

using namespace af;

namespace {

// Median seconds of one all-reduce of `bytes` over `ranks` ranks: every rank's thread makes `calls`
// calls per repetition; the figure is the repetition's time over its calls.
double allreduce_seconds(runtime& rt, int ranks, std::size_t bytes, int calls, int reps) {
  auto ring = collectives::ring_group::start(rt, {.ranks = ranks}).value();
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  std::vector<tensor> values;
  for (int r = 0; r < ranks; ++r) values.push_back(random_normal({n}, static_cast<uint64_t>(r)).value());
  uint64_t step = 0;
  std::vector<double> times;
  for (int rep = 0; rep <= reps; ++rep) {  // the first is a warm-up
    // Each call gets a tensor of its own, handed over as a replica hands over a fresh gradient
    // (summed in place); making them is not timed.
    std::vector<std::vector<tensor>> inputs(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
      for (int c = 0; c < calls; ++c) inputs[static_cast<std::size_t>(r)].push_back(values[static_cast<std::size_t>(r)].clone().value());
    std::barrier start{ranks + 1};
    std::vector<std::thread> replicas;
    for (int r = 0; r < ranks; ++r)
      replicas.emplace_back([&, r, first = step] {
        start.arrive_and_wait();
        for (int c = 0; c < calls; ++c)
          if (!ring.all_reduce(r, {first + static_cast<uint64_t>(c), 0},
                               std::move(inputs[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)])))
            std::abort();
      });
    const double s = bench::seconds_of([&] {
      start.arrive_and_wait();
      for (auto& t : replicas) t.join();
    });
    step += static_cast<uint64_t>(calls);
    if (rep > 0) times.push_back(s / calls);
  }
  return bench::median(times);
}

double memcpy_gbps(std::size_t bytes, int reps) {
  std::vector<char> src(bytes, 1), dst(bytes);
  const double s = bench::median_seconds(reps, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  return static_cast<double>(bytes) / s / 1e9;
}

// One direction of a loopback TCP connection between two threads: 64 MB in 4 MB writes, GB/s.
double tcp_gbps(int reps) {
  uint16_t port = 0;
  auto listener = net::listen_tcp("127.0.0.1", 0, port).value();
  auto sender = net::connect_tcp("127.0.0.1", port).value();
  std::atomic<bool> stop{false};
  auto receiver = net::accept_tcp(listener, stop).value();
  net::tune_bulk_socket(sender.get(), 4 << 20);
  net::tune_bulk_socket(receiver.get(), 4 << 20);
  constexpr std::size_t piece = 4 << 20, total = 64 << 20;
  std::vector<char> out(piece, 1), in(piece);
  const double s = bench::median_seconds(reps, [&] {
    std::thread reader{[&] {
      for (std::size_t got = 0; got < total; got += piece)
        if (!net::read_exact(receiver.get(), in.data(), piece)) std::abort();
    }};
    for (std::size_t sent = 0; sent < total; sent += piece)
      if (!net::write_all(sender.get(), out.data(), piece)) std::abort();
    reader.join();
  });
  return static_cast<double>(total) / s / 1e9;
}

int calls_for(std::size_t bytes, bool quick) { return bytes <= 65536 ? (quick ? 200 : 1000) : bytes <= (4 << 20) ? 10 : 2; }

// Median seconds of one all-reduce of `bytes` by this process's rank of a ring spanning two
// processes; both run the same calls with the same ids (a 1-element all-reduce lines them up
// before each repetition).
double procs_seconds(const collectives::ring_group& ring, int rank, std::size_t bytes, int calls, int reps, uint64_t& step) {
  const auto value = random_normal({static_cast<int64_t>(bytes / sizeof(float))}, static_cast<uint64_t>(rank)).value();
  std::vector<double> times;
  for (int rep = 0; rep <= reps; ++rep) {
    std::vector<tensor> inputs;
    for (int c = 0; c < calls; ++c) inputs.push_back(value.clone().value());
    if (!ring.all_reduce(rank, {step++, 1}, tensor::zeros({1}, dtype::f32).value())) std::abort();
    const double s = bench::seconds_of([&] {
      for (auto& in : inputs)
        if (!ring.all_reduce(rank, {step++, 0}, std::move(in))) std::abort();
    });
    if (rep > 0) times.push_back(s / calls);
  }
  return bench::median(times);
}

// What both processes run: every size over shared memory (the automatic choice on one host),
// then over TCP. Seconds per call by transport and size.
std::map<std::string, std::map<std::size_t, double>> run_process(int process, const std::string& rendezvous_shm,
                                                                  const std::string& rendezvous_tcp, const std::string& token,
                                                                  const std::vector<std::size_t>& sizes, bool quick) {
  runtime rt{{.scheduler_threads = 1}};
  std::map<std::string, std::map<std::size_t, double>> out;
  for (auto [name, transport, rendezvous] : {std::tuple{"shm", collectives::link_transport::automatic, rendezvous_shm},
                                            std::tuple{"tcp", collectives::link_transport::tcp, rendezvous_tcp}}) {
    auto ring = collectives::ring_group::start(
        rt, {.ranks = 2, .name = "bench", .across = {.process = process, .processes = 2, .rendezvous = rendezvous, .token = token,
                                                     .transport = transport}});
    if (!ring) {
      std::fprintf(stderr, "process %d: %s\n", process, ring.error_value().message.c_str());
      std::exit(1);
    }
    if (process == 0) std::printf("2 processes, link: %s\n", ring->transport_to(1).c_str());
    uint64_t step = 0;
    for (std::size_t bytes : sizes) out[name][bytes] = procs_seconds(*ring, process, bytes, calls_for(bytes, quick), quick ? 3 : 7, step);
  }
  return out;
}

std::string free_address() {
  uint16_t port = 0;
  auto probe = net::listen_tcp("127.0.0.1", 0, port).value();
  return "127.0.0.1:" + std::to_string(port);
}

// What train_samples_per_second trains.
struct training_run {
  bool cnn = false;  // the digits CNN (training/digits.hpp) instead of the MLP
  int replicas = 1;
  int64_t rows = 1024;  // per replica
  int steps = 40;
  bool overlap = true;
  // A single replica too runs the strategy's step (gradients, then the update) rather than the
  // model's fused step.
  bool split = false;
  std::size_t bucket_bytes = std::size_t{25} << 20;
};

// Samples per second of `run` over its replicas of one kernel thread each: the median over `reps`
// runs of its steps (after warm-up steps).
double train_samples_per_second(runtime& rt, const training_run& spec, int reps) {
  auto model = (spec.cnn ? train::digits_cnn(1) : train::digits_mlp(1)).value();
  if (!model.compile({.optimizer = optimizers::optimizer::adam(), .loss = {nn::sparse_categorical_crossentropy()}}))
    std::abort();
  const int replicas = spec.replicas, steps = spec.steps;
  const int64_t global = spec.rows * replicas;
  std::vector<std::pair<tensor, tensor>> batches;
  for (uint64_t b = 0; b < 8; ++b) {
    std::vector<int64_t> labels(static_cast<std::size_t>(global));
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i + b) % 10);
    batches.emplace_back(random_uniform({global, 8, 8, 1}, b).value(), tensor::from_vector(labels));
  }
  std::unique_ptr<distribute::replica_set> set;
  if (replicas > 1 || spec.split) {
    std::vector<std::string> devices;
    for (int r = 0; r < replicas; ++r) devices.push_back("cpu:" + std::to_string(r));
    set = distribute::mirrored_strategy(devices, {.threads_per_replica = 1, .bucket_bytes = spec.bucket_bytes, .overlap = spec.overlap})
              .value()
              ->start(rt, model)
              .value();
  }
  // The steps run as fit runs them: in the handler of a feed, a device actor, so rank 0 (or the
  // single replica) computes on that actor's thread without a request to another.
  uint64_t step = 0;
  auto run = [&](int count) {
    auto fed = data::feed(rt, data::dataset::range(count), [&](element&&) -> expected<data::feed_verdict> {
      scoped_thread_share one_thread{1};  // the single replica's share (mirrored replicas set their own)
      const auto& [x, y] = batches[step % batches.size()];
      auto r = set ? set->train_on_batch({x}, {y}, step) : model.train_on_batch({x}, {y}, step);
      ++step;
      if (!r) return r.error_value();
      return data::feed_verdict::more;
    });
    if (!fed || fed->status) {
      std::fprintf(stderr, "train steps: %s\n", fed ? fed->status.message.c_str() : fed.error_value().message.c_str());
      std::abort();
    }
  };
  run(5);
  std::vector<double> rates;
  for (int rep = 0; rep < reps; ++rep) rates.push_back(static_cast<double>(global * steps) / bench::seconds_of([&] { run(steps); }));
  return bench::median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const std::vector<std::size_t> sizes = quick ? std::vector<std::size_t>{4096, 1 << 20, 16 << 20, 64 << 20}
                                               : std::vector<std::size_t>{4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20};
  // The copy of this program that is process 1: --process-1 SHM_ADDRESS TCP_ADDRESS TOKEN [--quick]
  if (argc >= 5 && std::strcmp(argv[1], "--process-1") == 0) {
    run_process(1, argv[2], argv[3], argv[4], sizes, quick);
    return 0;
  }
  bench::check_flags(argc, argv, "build/bench/bench_allreduce [--quick]", {"--quick"});
  runtime rt{{.scheduler_threads = 2}};
  bench::json_line json;
  json.add("bench", std::string{"allreduce"});
  const double copy_gbps = memcpy_gbps(64 << 20, quick ? 5 : 11);
  json.add("memcpy_gbps", copy_gbps);
  std::printf("memcpy, one thread, 64 MB: %.2f GB/s\n", copy_gbps);
  // A group of one rank sums nothing: the cost of a call alone, the floor of small sizes.
  const double alone = allreduce_seconds(rt, 1, 4096, quick ? 200 : 1000, quick ? 3 : 7);
  json.add("inproc1_ms_4096", alone * 1e3);
  std::printf("1 rank,        4096 bytes: %8.3f ms (a call alone)\n", alone * 1e3);
  for (int ranks : {2, 4}) {
    double worst_large = 1e300;
    for (std::size_t bytes : sizes) {
      // Enough calls that small sizes are not one message's latency alone.
      const int calls = bytes <= 65536 ? (quick ? 200 : 1000) : bytes <= (4 << 20) ? 10 : 2;
      const double s = allreduce_seconds(rt, ranks, bytes, calls, quick ? 3 : 7);
      const double algbw = static_cast<double>(bytes) / s / 1e9;
      const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
      const std::string tag = "inproc" + std::to_string(ranks) + "_";
      json.add(tag + "busbw_gbps_" + std::to_string(bytes), busbw);
      json.add(tag + "ms_" + std::to_string(bytes), s * 1e3);
      if (bytes >= (1 << 20)) worst_large = std::min(worst_large, busbw / copy_gbps);
      std::printf("%d ranks, %9zu bytes: %8.3f ms, algbw %6.2f GB/s, busbw %6.2f GB/s (%.2f of memcpy)\n", ranks, bytes, s * 1e3,
                  algbw, busbw, busbw / copy_gbps);
    }
    json.add("inproc" + std::to_string(ranks) + "_busbw_vs_memcpy_min", worst_large);
  }
  {
    const double tcp = tcp_gbps(quick ? 3 : 7);
    json.add("tcp_gbps", tcp);
    std::printf("loopback TCP, one direction, 64 MB: %.2f GB/s\n", tcp);
    const std::string shm_address = free_address(), tcp_address = free_address();
    std::string token = std::to_string(std::random_device{}());
    std::vector<std::string> args{"/proc/self/exe", "--process-1", shm_address, tcp_address, token};
    if (quick) args.push_back("--quick");
    std::vector<char*> child_argv;
    for (auto& a : args) child_argv.push_back(a.data());
    child_argv.push_back(nullptr);
    pid_t child = 0;
    if (posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, child_argv.data(), environ) != 0) {
      std::perror("bench_allreduce: spawning process 1");
      return 1;
    }
    const auto measured = run_process(0, shm_address, tcp_address, token, sizes, quick);
    int status = 0;
    waitpid(child, &status, 0);
    for (const auto& [link, by_size] : measured) {
      const std::string tag = link == "shm" ? "procs2_" : "procs2_tcp_";
      for (const auto& [bytes, s] : by_size) {
        const double busbw = static_cast<double>(bytes) / s / 1e9;  // x 2(n-1)/n = 1 for 2 ranks
        json.add(tag + "busbw_gbps_" + std::to_string(bytes), busbw);
        json.add(tag + "ms_" + std::to_string(bytes), s * 1e3);
        std::printf("2 processes (%s), %9zu bytes: %8.3f ms, busbw %6.2f GB/s\n", link.c_str(), bytes, s * 1e3, busbw);
      }
    }
  }
  // Alternated so that each sees the same machine state.
  constexpr int64_t rows = 1024;
  const int steps = quick ? 40 : 100;
  std::vector<double> one, one_split, two, two_serial, independent;
  runtime trainer{{.scheduler_threads = 2, .idle_polls = 50}};  // a trainer's setting, as fit's users run it
  // Two replicas that exchange nothing, each a thread of its own: the machine's ceiling.
  auto apart_rate = [&](const training_run& alone, int reps) {
    double a = 0, b = 0;
    std::thread other{[&] { b = train_samples_per_second(trainer, alone, reps); }};
    a = train_samples_per_second(trainer, alone, reps);
    other.join();
    return a + b;
  };
  for (int round = 0; round < (quick ? 5 : 9); ++round) {
    const training_run mlp{.rows = rows, .steps = steps};
    one.push_back(train_samples_per_second(trainer, mlp, 1));
    one_split.push_back(train_samples_per_second(trainer, {.rows = rows, .steps = steps, .split = true}, 1));
    two.push_back(train_samples_per_second(trainer, {.replicas = 2, .rows = rows, .steps = steps}, 1));
    two_serial.push_back(train_samples_per_second(trainer, {.replicas = 2, .rows = rows, .steps = steps, .overlap = false}, 1));
    independent.push_back(apart_rate(mlp, 1));
  }
  const double one_rate = bench::median(one), two_rate = bench::median(two), apart = bench::median(independent);
  const double serial_rate = bench::median(two_serial);
  std::printf("digits MLP, %lld rows per replica: 1x1 %.0f samples/s, 2x1 mirrored %.0f (%.2fx; without overlap %.2fx), "
              "2 independent %.0f (%.2fx)\n",
              static_cast<long long>(rows), one_rate, two_rate, two_rate / one_rate, serial_rate / one_rate, apart, apart / one_rate);
  json.add("train_1x1_samples_per_s", one_rate);
  json.add("train_2x1_samples_per_s", two_rate);
  json.add("scaling_2x1_vs_1x1", two_rate / one_rate);
  json.add("scaling_independent_2x1_vs_1x1", apart / one_rate);
  json.add("scaling_2x1_no_overlap_vs_1x1", serial_rate / one_rate);
  // What splitting the step into gradients and update costs one replica, with nothing to exchange.
  json.add("split_step_1x1_vs_fused", bench::median(one_split) / one_rate);
  // A mirrored step's time over its compute alone (the same two replicas exchanging nothing).
  json.add("overlap_step_vs_compute", apart / two_rate);

  // The digits CNN's 212 KB of gradients in buckets of 64 KB (its dense kernel alone, the convolution's,
  // and the rest): the buckets of the last layers are summed while the earlier layers' gradients are
  // computed, or all after the pass (no overlap).
  {
    constexpr int64_t cnn_rows = 256;
    const int cnn_steps = quick ? 15 : 40;
    constexpr std::size_t cnn_bucket = std::size_t{64} << 10;
    std::vector<double> c_one, c_two, c_serial, c_apart;
    for (int round = 0; round < (quick ? 3 : 7); ++round) {
      const training_run cnn{.cnn = true, .rows = cnn_rows, .steps = cnn_steps};
      c_one.push_back(train_samples_per_second(trainer, cnn, 1));
      c_two.push_back(train_samples_per_second(
          trainer, {.cnn = true, .replicas = 2, .rows = cnn_rows, .steps = cnn_steps, .bucket_bytes = cnn_bucket}, 1));
      c_serial.push_back(train_samples_per_second(
          trainer, {.cnn = true, .replicas = 2, .rows = cnn_rows, .steps = cnn_steps, .overlap = false, .bucket_bytes = cnn_bucket}, 1));
      c_apart.push_back(apart_rate(cnn, 1));
    }
    const double c1 = bench::median(c_one), c2 = bench::median(c_two), cs = bench::median(c_serial), ca = bench::median(c_apart);
    std::printf("digits CNN, %lld rows per replica, 64 KB buckets: 2x1 mirrored %.2fx 1x1 (without overlap %.2fx), "
                "2 independent %.2fx\n",
                static_cast<long long>(cnn_rows), c2 / c1, cs / c1, ca / c1);
    json.add("cnn_scaling_2x1_vs_1x1", c2 / c1);
    json.add("cnn_scaling_2x1_no_overlap_vs_1x1", cs / c1);
    json.add("cnn_scaling_independent_2x1_vs_1x1", ca / c1);
    json.add("cnn_overlap_step_vs_compute", ca / c2);
  }
  json.print();
  return 0;
}
