// `actorflow serve` as a user runs it: TF Serving's flags, the line that says it is ready, clear
// errors for flags and files that do not fit, a clean stop on SIGTERM, and TF Serving's own
// Python clients (REST with `requests`, gRPC with tensorflow-serving-api) working unchanged.

#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <regex>
#include <thread>

#include "../support/scratch_dir.hpp"
#include "../support/eventually.hpp"
#include "../support/skip.hpp"
#include "../serving/serving_fixtures.hpp"
#include "cli_test_support.hpp"
#include "ops/train/layers.hpp"
#include "serialization/saved_model.hpp"

using namespace af;
using namespace af::testing;
using Catch::Contains;

namespace {

void save_dense_model(const std::filesystem::path& dir) {
  auto x = nn::input({4}, dtype::f32, "x");
  auto y = nn::dense(3, {.name = "y"})(x);
  auto model = nn::model::functional({x}, {y}, {.seed = 5});
  REQUIRE(model);
  REQUIRE(saved_model::save(*model, dir.string()));
}

struct ports {
  int rest = 0, grpc = 0, actor = 0;
};

// Reads the server's stdout up to its ready line.
ports wait_ready(child_process& server) {
  for (;;) {
    auto line = server.read_line(std::chrono::seconds(60));
    REQUIRE(line);
    std::smatch m;
    if (std::regex_search(*line, m, std::regex{R"(serving: ready rest=(\d+) grpc=(\d+) actor=(\d+))"}))
      return {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])};
  }
}

}  // namespace

TEST_CASE("actorflow serve starts on TF Serving's flags and stops cleanly on SIGTERM", "[cli][serve]") {
  scratch_dir cwd{"af_cli_serve"};
  save_dense_model(cwd.path / "models" / "dense" / "1");
  {
    std::ofstream batching{cwd.path / "batching.txt"};
    batching << "max_batch_size { value: 16 }\nbatch_timeout_micros { value: 500 }\nnum_batch_threads { value: 2 }\n"
                "allowed_batch_sizes: 8\nallowed_batch_sizes: 16\n";
  }
  child_process server{{AF_ACTORFLOW_PATH, "serve", "--model_name=dense", "--model_base_path=" + (cwd.path / "models" / "dense").string(),
                        "--rest_api_port=-1", "--port=-1", "--enable_batching", "--batching_parameters_file=batching.txt",
                        "--file_system_poll_wait_seconds=0", "--tensorflow_intra_op_parallelism=1",
                        // TF Serving's flags this server does not act on: accepted, each named in a warning.
                        "--enable_model_warmup", "--num_load_threads=4", "--grpc_channel_arguments=grpc.max_connection_age_ms=1000",
                        "--grpc_max_threads=3"},
                       cwd.path};
  const ports p = wait_ready(server);
  CHECK(p.rest > 0);
  CHECK(p.grpc > 0);
  CHECK(p.actor == 0);
  server.signal(SIGTERM);
  auto r = server.finish(std::chrono::seconds(30));
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("serving: model 'dense': 1 AVAILABLE") && Contains("SIGTERM, stopping"));
  CHECK_THAT(r.out, Contains("kernels use up to 1 threads"));
  // The REST front end takes a thread per core unless told otherwise; TF Serving's
  // --grpc_max_threads sizes gRPC's.
  const std::string cores = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
  CHECK_THAT(r.out, Contains("front-end threads: REST " + cores + ", gRPC 3"));
  CHECK_THAT(r.err, Contains("warning: --enable_model_warmup=true is TF Serving's and is accepted without effect here") &&
                        Contains("--num_load_threads=4"));
  CHECK(r.err.find("--grpc_channel_arguments") == std::string::npos);  // taken, not warned about
  CHECK_THAT(r.out, Contains("serving: metrics at /monitoring/prometheus/metrics"));
}

TEST_CASE("actorflow serve re-reads its model config file and takes its monitoring config", "[cli][serve]") {
  scratch_dir cwd{"af_cli_serve"};
  save_dense_model(cwd.path / "models" / "a" / "1");
  save_dense_model(cwd.path / "models" / "b" / "1");
  auto write_config = [&](std::vector<std::string> names) {
    std::ofstream config{cwd.path / "models.config.tmp"};
    config << "model_config_list {\n";
    for (const auto& name : names) config << "  config { name: '" << name << "' base_path: '" << (cwd.path / "models" / name).string() << "' }\n";
    config << "}\n";
    config.close();
    std::filesystem::rename(cwd.path / "models.config.tmp", cwd.path / "models.config");  // as operators replace it: whole
  };
  write_config({"a"});
  {
    std::ofstream monitoring{cwd.path / "monitoring.config"};
    monitoring << "prometheus_config { enable: true path: \"/metrics\" }\n";
  }
  child_process server{{AF_ACTORFLOW_PATH, "serve", "--model_config_file=models.config", "--model_config_file_poll_wait_seconds=1",
                        "--monitoring_config_file=monitoring.config", "--rest_api_port=-1", "--port=0"},
                       cwd.path};
  const ports p = wait_ready(server);
  testing::http_client rest{static_cast<uint16_t>(p.rest)};
  CHECK(rest.request("GET", "/metrics").status == 200);
  CHECK(rest.request("GET", "/monitoring/prometheus/metrics").status == 404);
  CHECK(rest.request("GET", "/v1/models/b").status == 404);
  write_config({"a", "b"});
  CHECK(eventually([&] { return rest.request("GET", "/v1/models/b").status == 200; }, std::chrono::seconds(60)));
  write_config({"b"});
  CHECK(eventually([&] { return rest.request("GET", "/v1/models/a").status == 404; }, std::chrono::seconds(60)));
  CHECK(rest.request("POST", "/v1/models/b:predict", R"({"instances": [[1, 2, 3, 4]]})").status == 200);
  server.signal(SIGTERM);
  auto r = server.finish(std::chrono::seconds(30));
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("models.config reloaded: serving a, b") && Contains("models.config reloaded: serving b"));
}

TEST_CASE("actorflow serve refuses flags and files that do not fit, naming them", "[cli][serve]") {
  scratch_dir cwd{"af_cli_serve"};
  save_dense_model(cwd.path / "m" / "1");
  const std::string base = "--model_base_path=" + (cwd.path / "m").string();
  auto refused = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "serve");
    auto r = actorflow(args, cwd.path);
    INFO(command_line(args) << "\n" << describe(r));
    CHECK(r.exit_code != 0);
    CHECK(r.out.find("serving: ready") == std::string::npos);
    return r.err;
  };
  CHECK_THAT(refused({"--model_name=m"}), Contains("--model_base_path"));
  CHECK_THAT(refused({base, "--no_such_flag=1"}), Contains("unknown flag --no_such_flag"));
  CHECK_THAT(refused({base, "--rest_api_port=http"}), Contains("--rest_api_port must be an integer"));
  CHECK_THAT(refused({base, "--tensorflow_intra_op_parallelism=-2"}), Contains("--tensorflow_intra_op_parallelism must be an integer >= 0"));
  CHECK_THAT(refused({base, "--rest_api_num_threads=-1"}), Contains("--rest_api_num_threads must be an integer >= 0"));
  CHECK_THAT(refused({"--model_base_path=" + (cwd.path / "absent").string()}), Contains("absent"));
  CHECK_THAT(refused({base, "--batching_parameters_file=b.txt"}), Contains("--enable_batching"));
  {
    std::ofstream bad{cwd.path / "bad.txt"};
    bad << "max_batch_size { value: 8 }\nbatch_timeout_micros { valu: 5 }\n";
  }
  CHECK_THAT(refused({base, "--enable_batching", "--batching_parameters_file=bad.txt"}), Contains("bad.txt:2"));
  CHECK_THAT(refused({base, "--enable_batching", "--batching_parameters_file=missing.txt"}), Contains("missing.txt"));
  CHECK_THAT(refused({base, "--rest_api_port=0", "--port=0"}), Contains("every front end is off"));
  CHECK_THAT(refused({base, "--model_config_file_poll_wait_seconds=5"}), Contains("needs --model_config_file"));
  CHECK_THAT(refused({base, "--grpc_channel_arguments=grpc.keepalive_time_ms"}), Contains("--grpc_channel_arguments") && Contains("key=value"));
  {
    std::ofstream monitoring{cwd.path / "monitoring.txt"};
    monitoring << "prometheus_config { enable: true path: \"metrics\" }\n";
  }
  CHECK_THAT(refused({base, "--monitoring_config_file=monitoring.txt"}), Contains("monitoring.txt:1:") && Contains("'metrics'"));
}

TEST_CASE("TF Serving's Python clients work unchanged against actorflow serve", "[cli][serve]") {
  // scripts/test installs the clients (and fails when it cannot): there, this test cannot skip. A
  // run by hand without them skips, decided here before anything is asserted.
  const char* python = std::getenv("AF_TF_SERVING_PYTHON");
  if (!python || !*python) AF_SKIP("AF_TF_SERVING_PYTHON is not set (AF_TF_SERVING_PYTHON=$(scripts/setup_serving_clients | tail -1))");
  const std::string interpreter = python;
  scratch_dir cwd{"af_cli_serve"};
  save_dense_model(cwd.path / "models" / "dense" / "1");
  testing::save_inference_model(cwd.path / "models" / "examples" / "1");
  testing::save_keyed_model(cwd.path / "models" / "keyed" / "1");
  {
    std::ofstream config{cwd.path / "models.config"};
    config << "model_config_list {\n";
    for (const char* name : {"dense", "examples", "keyed"})
      config << "  config { name: '" << name << "' base_path: '" << (cwd.path / "models" / name).string() << "' model_platform: 'tensorflow' }\n";
    config << "}\n";
  }
  child_process server{{AF_ACTORFLOW_PATH, "serve", "--model_config_file=models.config", "--rest_api_port=-1", "--port=-1", "--enable_batching"},
                       cwd.path};
  const ports p = wait_ready(server);
  // "dense": Predict on its serving_default. "examples": Predict on its "predict" signature, and
  // Classify, Regress and MultiInference on those saved with those methods.
  auto check_model = [&](const std::string& model, const std::string& signature) {
    return run_program({"/usr/bin/env", interpreter, std::string{AF_SOURCE_DIR} + "/scripts/check_tf_serving_clients.py", "--grpc_port",
                        std::to_string(p.grpc), "--rest_port", std::to_string(p.rest), "--model", model, "--signature", signature},
                       cwd.path, std::chrono::seconds(240));
  };
  auto dense = check_model("dense", "serving_default");
  auto examples = check_model("examples", "predict");
  auto keyed = check_model("keyed", "serving_default");
  server.signal(SIGTERM);
  server.finish(std::chrono::seconds(30));
  INFO(describe(dense));
  INFO(describe(examples));
  INFO(describe(keyed));
  CHECK(dense.exit_code == 0);
  CHECK_THAT(dense.out, Contains("all checks passed"));
  CHECK(examples.exit_code == 0);
  CHECK_THAT(examples.out, Contains("gRPC Classify 'classify'") && Contains("REST and gRPC Regress agree on 'regress'") &&
                               Contains("gRPC MultiInference: 'serving_default' as called alone") && Contains("all checks passed"));
  // DT_STRING through TF Serving's clients: string_val over gRPC, b64 over REST.
  CHECK(keyed.exit_code == 0);
  CHECK_THAT(keyed.out, Contains("DT_STRING output 'key_bytes' returns input 'key' byte for byte") &&
                            Contains("REST and gRPC predictions agree on DT_STRING output 'key'") && Contains("all checks passed"));
}
