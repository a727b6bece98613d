// mirrored_strategy across real processes: each process is tests/strategies/peer/mirrored_peer,
// joined to the others through the ring's rendezvous; they end with the weights of one replica
// given the same global batches (and with the very bits of the same replicas in one process), over
// shared memory and over TCP; fit reports the global batch's loss and accuracy in every process;
// a process that dies fails the others' step at once, naming it.

#include <catch2/catch.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/remote_socket.hpp"
#include "actors/runtime.hpp"
#include "strategies/strategy.hpp"
#include "training/trainer.hpp"

#include "digits_like.hpp"

using namespace af;
using namespace af::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct peer_result {
  std::string error;                          // "error: ..." the peer wrote, or why it has no result
  std::vector<double> reported;               // losses per step, or fit's losses then accuracies
  std::vector<std::vector<double>> weights;
  int exit_code = -1;
};

std::vector<double> read_list(std::ifstream& in) {
  double n = 0;
  if (!in.read(reinterpret_cast<char*>(&n), sizeof n)) return {};
  std::vector<double> out(static_cast<std::size_t>(n));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(double)));
  return out;
}

peer_result read_result(const fs::path& file, int exit_code) {
  peer_result r;
  r.exit_code = exit_code;
  std::ifstream in{file, std::ios::binary};
  if (!in) {
    r.error = "no result file (exit code " + std::to_string(exit_code) + ")";
    return r;
  }
  std::string head(7, '\0');
  in.read(head.data(), 7);
  if (head == "error: ") {
    r.error.assign(std::istreambuf_iterator<char>(in), {});
    return r;
  }
  in.seekg(0);
  r.reported = read_list(in);
  for (auto w = read_list(in); !w.empty(); w = read_list(in)) r.weights.push_back(std::move(w));
  return r;
}

std::string free_rendezvous() {
  uint16_t port = 0;
  auto listener = net::listen_tcp("127.0.0.1", 0, port);
  REQUIRE(listener);
  return "127.0.0.1:" + std::to_string(port);
}

// Starts every process of a run and waits for all (at most two minutes, then kills them).
std::vector<peer_result> run_processes(int processes, int replicas, const std::string& kind, int steps, const std::string& transport,
                                       int exit_after_in_process_1 = -1) {
  const auto dir = fs::temp_directory_path() / ("af_mirrored_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  const std::string rendezvous = free_rendezvous(), token = std::to_string(std::random_device{}());
  std::vector<pid_t> pids;
  for (int p = 0; p < processes; ++p) {
    std::vector<std::string> args{AF_MIRRORED_PEER, std::to_string(p), std::to_string(processes), std::to_string(replicas), rendezvous, token,
                                  kind, std::to_string(steps), transport, (dir / ("out" + std::to_string(p))).string()};
    if (p == 1 && exit_after_in_process_1 >= 0) args.push_back(std::to_string(exit_after_in_process_1));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, AF_MIRRORED_PEER, nullptr, nullptr, argv.data(), environ) == 0);
    pids.push_back(pid);
  }
  std::vector<int> codes(pids.size(), -1);
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (std::size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    while (waitpid(pids[i], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pids[i], SIGKILL);
        waitpid(pids[i], &status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::vector<peer_result> out;
  for (int p = 0; p < processes; ++p) out.push_back(read_result(dir / ("out" + std::to_string(p)), codes[static_cast<std::size_t>(p)]));
  fs::remove_all(dir);
  return out;
}

nn::model make_model(const std::string& kind) {
  if (kind == "bn") return digits_like_bn_mlp(optimizers::optimizer::sgd({.learning_rate = 0.05, .momentum = 0.9}));
  return kind == "cnn" ? digits_like_cnn(optimizers::optimizer::sgd({.learning_rate = 0.05, .momentum = 0.9}))
                       : digits_like_mlp(optimizers::optimizer::adam({.learning_rate = 0.001}));
}

// The same steps in this process: through `replicas` mirrored replicas, or the model alone (1).
std::vector<double> train_here(runtime& rt, nn::model& model, int replicas, int steps) {
  std::unique_ptr<distribute::replica_set> set;
  if (replicas > 1) {
    std::vector<std::string> devices;
    for (int r = 0; r < replicas; ++r) devices.push_back("cpu:" + std::to_string(r));
    // One thread each, as the peers' replicas: a kernel split over another number of threads
    // sums in another order (on Zen 5, a 1-replica process's 2 threads changed the last bits).
    set = distribute::mirrored_strategy(devices, {.threads_per_replica = 1}).value()->start(rt, model).value();
  }
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const auto b = make_batch(64, 100 + static_cast<uint64_t>(step));
    auto r = set ? set->train_on_batch({b.images}, {b.labels}, 0) : model.train_on_batch({b.images}, {b.labels}, 0);
    REQUIRE(r);
    losses.push_back(r->loss);
  }
  if (set) REQUIRE(set->sync_into_model());
  return losses;
}

}  // namespace

TEST_CASE("2 processes, of 1 or 2 replicas each, end with the weights of one replica given the same global batches",
          "[cpu][strategies][processes]") {
  const std::string kind = GENERATE("mlp", "cnn");
  const int replicas = GENERATE(1, 2);
  INFO(kind << ", 2 processes of " << replicas << " replica(s)");
  runtime rt;
  auto one = make_model(kind);
  const auto losses_one = train_here(rt, one, 1, 20);
  auto together = make_model(kind);  // the same replicas in one process
  train_here(rt, together, 2 * replicas, 20);

  const auto results = run_processes(2, replicas, kind, 20, "auto");
  for (const auto& r : results) {
    INFO("a process failed: " << r.error);
    REQUIRE(r.error.empty());
    REQUIRE(r.exit_code == 0);
    CHECK(weight_distance(r.weights, weights_of(one)) <= 1e-5);
    CHECK(r.weights == weights_of(together));  // the very bits of the same ring in one process
    REQUIRE(r.reported.size() == losses_one.size());
    for (std::size_t s = 0; s < losses_one.size(); ++s) CHECK(r.reported[s] == Approx(losses_one[s]).epsilon(1e-5));
  }
  CHECK(weight_distance(weights_of(one), weights_of(make_model(kind))) > 1e-3);  // the steps did move the weights
}

TEST_CASE("moving statistics are averaged over the replicas of every process, as over replicas in one process",
          "[cpu][strategies][processes]") {
  runtime rt;
  auto together = make_model("bn");  // 2 replicas in this process
  train_here(rt, together, 2, 10);
  const auto results = run_processes(2, 1, "bn", 10, "auto");
  for (const auto& r : results) {
    INFO("a process failed: " << r.error);
    REQUIRE(r.error.empty());
    CHECK(weight_distance(r.weights, weights_of(together)) <= 1e-6);
  }
  CHECK(results[0].weights == results[1].weights);
  // The statistics did differ between the replicas: the mean is not either replica's own.
  auto alone = make_model("bn");
  train_here(rt, alone, 1, 10);
  CHECK(weight_distance(weights_of(alone), weights_of(together)) > 1e-7);
}

TEST_CASE("2 processes end with the same bits over TCP as over shared memory", "[cpu][strategies][processes]") {
  const auto shared = run_processes(2, 1, "mlp", 10, "auto");
  const auto tcp = run_processes(2, 1, "mlp", 10, "tcp");
  for (std::size_t p = 0; p < 2; ++p) {
    INFO("process " << p << ": " << shared[p].error << tcp[p].error);
    REQUIRE(shared[p].error.empty());
    REQUIRE(tcp[p].error.empty());
    CHECK(tcp[p].weights == shared[p].weights);
    CHECK(tcp[p].reported == shared[p].reported);
  }
}

TEST_CASE("fit across 2 processes reports the global batches' loss and accuracy in each, as fit in one process does",
          "[cpu][strategies][processes]") {
  runtime rt;
  auto x = random_uniform({200, 8, 8, 1}, 11).value();
  std::vector<int64_t> labels(200);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  const auto data = data::dataset::from_tensor_slices({{"image", x}, {"label", tensor::from_vector(labels)}}).batch(32);
  auto alone = make_model("mlp");
  auto history = train::fit(rt, alone, data, {.epochs = 3, .verbose = train::verbosity::silent});
  REQUIRE(history);
  std::vector<double> want = history->of("loss");
  for (double a : history->of("accuracy")) want.push_back(a);

  const auto results = run_processes(2, 1, "fit", 3, "auto");
  for (const auto& r : results) {
    INFO("a process failed: " << r.error);
    REQUIRE(r.error.empty());
    CHECK(weight_distance(r.weights, weights_of(alone)) <= 1e-5);
    REQUIRE(r.reported.size() == want.size());
    for (std::size_t i = 0; i < 3; ++i) CHECK(r.reported[i] == Approx(want[i]).epsilon(1e-5));  // loss
    for (std::size_t i = 3; i < 6; ++i) CHECK(r.reported[i] == want[i]);                       // accuracy
  }
  CHECK(results[0].reported == results[1].reported);
}

TEST_CASE("a process that dies mid-training fails the other's step at once, naming it", "[cpu][strategies][processes]") {
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_processes(2, 1, "mlp", 20, "auto", 5);  // process 1 leaves before step 6, as a crash does
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(results[1].exit_code == 3);
  CHECK(results[0].exit_code == 2);
  CHECK_THAT(results[0].error, Catch::Contains("process 1"));
  CHECK(took < 20s);  // detected from the link, not after the 30 s collective timeout
}
