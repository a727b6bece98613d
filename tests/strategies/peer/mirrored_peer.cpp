// One process of a mirrored run spanning processes, for tests/strategies/mirrored_processes_test.cpp:
// trains the digits-like MLP or CNN for some steps on the test's global batches under
// mirrored_strategy with replicas in every process, or fits it on the test's dataset, then writes
// what it reported and its final weights to a file (f64 values, each list preceded by its length)
// or, when a step fails, "error: " and the message.
//
//   mirrored_peer PROCESS PROCESSES REPLICAS RENDEZVOUS TOKEN mlp|cnn|bn|fit STEPS TRANSPORT OUT [EXIT_AFTER]
//
// bn: the MLP with a batch normalization, its replicas' moving statistics averaged into the model
// (sync_into_model) after the steps.
//
// EXIT_AFTER: leave (std::_Exit, as a crash does) before that step, to test the survivors.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "actors/runtime.hpp"
#include "strategies/strategy.hpp"
#include "training/trainer.hpp"

#include "../digits_like.hpp"

using namespace af;
using namespace af::testing;

namespace {

void write_list(std::ofstream& out, const std::vector<double>& values) {
  const double n = static_cast<double>(values.size());
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(double)));
}

int fail(const std::string& path, const std::string& why) {
  std::ofstream out{path};
  out << "error: " << why;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 10) {
    std::fprintf(stderr, "usage: mirrored_peer PROCESS PROCESSES REPLICAS RENDEZVOUS TOKEN mlp|cnn|fit STEPS TRANSPORT OUT [EXIT_AFTER]\n");
    return 1;
  }
  const int process = std::atoi(argv[1]), processes = std::atoi(argv[2]), replicas = std::atoi(argv[3]);
  const std::string rendezvous = argv[4], token = argv[5], kind = argv[6], out_path = argv[9];
  const int steps = std::atoi(argv[7]);
  const auto transport = std::string{argv[8]} == "tcp" ? collectives::link_transport::tcp : collectives::link_transport::automatic;
  const int exit_after = argc > 10 ? std::atoi(argv[10]) : -1;
  try {
    runtime rt{{.scheduler_threads = 1}};
    auto model = kind == "cnn"  ? digits_like_cnn(optimizers::optimizer::sgd({.learning_rate = 0.05, .momentum = 0.9}))
                 : kind == "bn" ? digits_like_bn_mlp(optimizers::optimizer::sgd({.learning_rate = 0.05, .momentum = 0.9}))
                                : digits_like_mlp(optimizers::optimizer::adam({.learning_rate = 0.001}));
    std::vector<std::string> devices;
    for (int r = 0; r < replicas; ++r) devices.push_back("cpu:" + std::to_string(r));
    auto strategy = distribute::mirrored_strategy(
        devices, {.threads_per_replica = 1,  // as the test's replicas in one process: the same bits
                  .timeout = std::chrono::milliseconds{30000},
                  .across = {.process = process, .processes = processes, .rendezvous = rendezvous, .token = token, .transport = transport}});
    if (!strategy) return fail(out_path, strategy.error_value().message);
    std::vector<double> reported;  // losses per step, or fit's history: loss then accuracy per epoch
    if (kind == "fit") {
      auto x = random_uniform({200, 8, 8, 1}, 11).value();
      std::vector<int64_t> labels(200);
      for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
      const auto data = data::dataset::from_tensor_slices({{"image", x}, {"label", tensor::from_vector(labels)}}).batch(32);
      auto history = train::fit(rt, model, data, {.epochs = steps, .verbose = train::verbosity::silent, .strategy = *strategy});
      if (!history) return fail(out_path, history.error_value().message);
      for (double v : history->of("loss")) reported.push_back(v);
      for (double v : history->of("accuracy")) reported.push_back(v);
    } else {
      auto set = (*strategy)->start(rt, model);
      if (!set) return fail(out_path, set.error_value().message);
      for (int step = 0; step < steps; ++step) {
        if (step == exit_after) std::_Exit(3);
        const auto b = make_batch(64, 100 + static_cast<uint64_t>(step));
        auto r = (*set)->train_on_batch({b.images}, {b.labels}, 0);
        if (!r) return fail(out_path, r.error_value().message);
        if (r->predictions.empty() || r->predictions[0].dim(0) != 64) return fail(out_path, "predictions are not the global batch's");
        reported.push_back(r->loss);
      }
      if (kind == "bn")
        if (auto synced = (*set)->sync_into_model(); !synced) return fail(out_path, synced.error_value().message);
    }
    std::ofstream out{out_path, std::ios::binary};
    write_list(out, reported);
    for (const auto& w : weights_of(model)) write_list(out, w);
    return 0;
  } catch (const std::exception& e) {
    return fail(out_path, e.what());
  }
}
