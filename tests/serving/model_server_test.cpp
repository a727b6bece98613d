// The model manager: it serves what the version policy wants, takes a new version only once it is
// loaded, checked and warmed up, refuses a corrupt one while the old keeps serving, drains and
// unloads the old one, and a swap under load fails no request.

#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../support/scratch_dir.hpp"
#include "actors/runtime.hpp"
#include "apps/serving/config_watcher.hpp"
#include "apps/serving/metrics.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/serving_config.hpp"
#include "serving_fixtures.hpp"

using namespace af;
using namespace af::serving;
namespace fs = std::filesystem;

namespace {

tensor some_rows(int64_t rows) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows * 4; ++i) v.push_back(0.25f * static_cast<float>(i % 7) - 0.5f);
  return tensor::from_vector<float>(v, {rows, 4});
}

// What version `seed`'s model answers for `x`, computed by the model itself.
tensor expected_output(uint64_t seed, const tensor& x) {
  return testing::small_dense(seed).predict_on_batch({x}).value().front();
}

server_options manual_polling(bool batching = false) {
  server_options o;
  o.enable_batching = batching;
  o.batching.max_batch_size = 8;
  o.batching.batch_timeout = std::chrono::microseconds(500);
  o.poll_interval = std::chrono::milliseconds(0);
  return o;
}

std::vector<int64_t> versions_in(const std::vector<version_status>& statuses, version_state state) {
  std::vector<int64_t> out;
  for (const auto& s : statuses)
    if (s.state == state) out.push_back(s.version);
  return out;
}

}  // namespace

TEST_CASE("the server answers with the highest version and its outputs are the model's", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  testing::save_version(scratch.path, 1, 11);
  testing::save_version(scratch.path, 2, 22);
  fs::create_directories(scratch.path / "not_a_version");
  runtime rt;
  auto server = model_server::start(rt, {{.name = "dense", .base_path = scratch.path.string()}}, manual_polling(GENERATE(false, true)));
  REQUIRE(server);
  auto status = (*server)->status("dense", std::nullopt);
  REQUIRE(status);
  CHECK(versions_in(*status, version_state::available) == std::vector<int64_t>{2});

  const tensor x = some_rows(3);
  auto answer = (*server)->predict({.name = "dense"}, {{"x", x}});
  REQUIRE(answer);
  CHECK(answer->version == 2);
  CHECK(answer->signature->outputs.front().name == "y");
  CHECK(all_close(answer->outputs.front(), expected_output(22, x), 1e-6, 1e-6));

  SECTION("unknown models and versions are not_found, signatures failed_precondition; bad inputs invalid_argument") {
    CHECK((*server)->predict({.name = "nope"}, {{"x", x}}).error_value().code == errc::not_found);
    CHECK((*server)->predict({.name = "dense", .version = 1}, {{"x", x}}).error_value().code == errc::not_found);
    CHECK((*server)->predict({.name = "dense", .signature_name = "other"}, {{"x", x}}).error_value().code == errc::failed_precondition);
    CHECK((*server)->predict({.name = "dense"}, {{"z", x}}).error_value().code == errc::invalid_argument);
    CHECK((*server)->predict({.name = "dense"}, {{"x", some_rows(1).reshape({2, 2}).value()}}).error_value().code ==
          errc::invalid_argument);
    CHECK((*server)->status("nope", std::nullopt).error_value().code == errc::not_found);
  }
}

TEST_CASE("version policies: all, specific, and labels naming versions", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  for (int64_t v : {1, 2, 3}) testing::save_version(scratch.path, v, static_cast<uint64_t>(v));
  runtime rt;
  model_config all;
  all.name = "all";
  all.base_path = scratch.path.string();
  all.policy.choice = version_policy::kind::all;
  model_config some;
  some.name = "some";
  some.base_path = scratch.path.string();
  some.policy.choice = version_policy::kind::specific;
  some.policy.specific_versions = {1, 3, 7};
  some.version_labels = {{"stable", 1}, {"canary", 3}};
  auto server = model_server::start(rt, {all, some}, manual_polling());
  REQUIRE(server);
  CHECK(versions_in((*server)->status("all", std::nullopt).value(), version_state::available) == std::vector<int64_t>{3, 2, 1});
  CHECK(versions_in((*server)->status("some", std::nullopt).value(), version_state::available) == std::vector<int64_t>{3, 1});
  const tensor x = some_rows(2);
  auto stable = (*server)->predict({.name = "some", .version_label = "stable"}, {{"x", x}});
  REQUIRE(stable);
  CHECK(stable->version == 1);
  CHECK(all_close(stable->outputs.front(), expected_output(1, x), 1e-6, 1e-6));
  CHECK((*server)->predict({.name = "some", .version_label = "beta"}, {{"x", x}}).error_value().code == errc::not_found);
  CHECK((*server)->predict({.name = "all", .version = 2}, {{"x", x}})->version == 2);
}

TEST_CASE("a new version takes over once loaded, a corrupt one is refused and the old one keeps serving", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  testing::save_version(scratch.path, 1, 1);
  runtime rt;
  auto metrics = std::make_shared<serving_metrics>();
  auto server = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, manual_polling(true), metrics);
  REQUIRE(server);
  const tensor x = some_rows(2);

  // Version 2 arrives corrupt: one byte of its weights differs from its manifest.
  testing::save_version(scratch.path, 2, 2);
  {
    std::fstream data(scratch.path / "2" / "variables" / "data", std::ios::in | std::ios::out | std::ios::binary);
    data.seekg(70);
    char c = 0;
    data.read(&c, 1);
    data.seekp(70);
    c = static_cast<char>(c ^ 0x10);
    data.write(&c, 1);
  }
  (*server)->poll_now();
  auto status = (*server)->status("m", std::nullopt).value();
  CHECK(versions_in(status, version_state::available) == std::vector<int64_t>{1});
  REQUIRE(versions_in(status, version_state::end) == std::vector<int64_t>{2});
  CHECK_THAT(status.front().status.message, Catch::Contains("2"));
  CHECK((*server)->predict({.name = "m"}, {{"x", x}})->version == 1);
  // Polling again does not retry the same bytes.
  (*server)->poll_now();
  CHECK(versions_in((*server)->status("m", std::nullopt).value(), version_state::available) == std::vector<int64_t>{1});

  // A good copy of version 2 replaces the corrupt one: it is loaded, and version 1 drains and ends.
  fs::remove_all(scratch.path / "2");
  testing::save_version(scratch.path, 2, 2);
  (*server)->poll_now();
  status = (*server)->status("m", std::nullopt).value();
  CHECK(versions_in(status, version_state::available) == std::vector<int64_t>{2});
  CHECK(versions_in(status, version_state::end) == std::vector<int64_t>{1});
  auto answer = (*server)->predict({.name = "m"}, {{"x", x}});
  REQUIRE(answer);
  CHECK(answer->version == 2);
  CHECK(all_close(answer->outputs.front(), expected_output(2, x), 1e-6, 1e-6));

  const std::string text = metrics->prometheus_text();
  CHECK_THAT(text, Catch::Contains("actorflow_serving_model_load_count{model=\"m\",version=\"2\",outcome=\"failed\"} 1"));
  CHECK_THAT(text, Catch::Contains("actorflow_serving_model_load_count{model=\"m\",version=\"2\",outcome=\"loaded\"} 1"));
  CHECK_THAT(text, Catch::Contains("actorflow_serving_request_count{model=\"m\",version=\"2\",signature=\"serving_default\",outcome=\"OK\"} 1"));
}

TEST_CASE("versions swapped under load fail no request", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  testing::save_version(scratch.path, 1, 1);
  runtime rt;
  auto server = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, manual_polling(true));
  REQUIRE(server);
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, failed{0};
  std::vector<std::thread> clients;
  std::string first_failure;
  std::mutex failure_mtx;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&] {
      const tensor x = some_rows(1);
      while (!stop.load()) {
        auto answer = (*server)->predict({.name = "m"}, {{"x", x}});
        if (answer) {
          ++answered;
        } else {
          ++failed;
          std::lock_guard<std::mutex> guard{failure_mtx};
          if (first_failure.empty()) first_failure = answer.error_value().message;
        }
      }
    });
  for (int64_t v = 2; v <= 6; ++v) {
    testing::save_version(scratch.path, v, static_cast<uint64_t>(v));
    (*server)->poll_now();
    CHECK(versions_in((*server)->status("m", std::nullopt).value(), version_state::available) == std::vector<int64_t>{v});
  }
  stop = true;
  for (auto& t : clients) t.join();
  INFO(first_failure);
  CHECK(failed.load() == 0);
  CHECK(answered.load() > 0);
  CHECK(versions_in((*server)->status("m", std::nullopt).value(), version_state::end) == std::vector<int64_t>{5, 4, 3, 2, 1});
}

TEST_CASE("a server polls its base path on its own", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  testing::save_version(scratch.path, 1, 1);
  runtime rt;
  server_options o = manual_polling();
  o.poll_interval = std::chrono::milliseconds(20);
  auto server = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, o);
  REQUIRE(server);
  testing::save_version(scratch.path, 3, 3);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (versions_in((*server)->status("m", std::nullopt).value(), version_state::available) != std::vector<int64_t>{3} &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(versions_in((*server)->status("m", std::nullopt).value(), version_state::available) == std::vector<int64_t>{3});
}

TEST_CASE("a server refuses a configuration that cannot work", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  runtime rt;
  CHECK(model_server::start(rt, {}, manual_polling()).error_value().code == errc::invalid_argument);
  auto missing = model_server::start(rt, {{.name = "m", .base_path = (scratch.path / "absent").string()}}, manual_polling());
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.error_value().message, Catch::Contains("absent"));
  auto twice = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}, {.name = "m", .base_path = scratch.path.string()}},
                                   manual_polling());
  CHECK(twice.error_value().code == errc::invalid_argument);
  // An empty base path is served as "no version yet", not an error: versions may come later.
  auto empty = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, manual_polling());
  REQUIRE(empty);
  CHECK((*empty)->predict({.name = "m"}, {{"x", some_rows(1)}}).error_value().code == errc::not_found);
}

TEST_CASE("a version whose recorded warmup requests do not parse is refused, naming the file", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  testing::save_version(scratch.path, 1, 1);
  fs::create_directories(scratch.path / "1" / "assets.extra");
  {
    std::ofstream garbage(scratch.path / "1" / "assets.extra" / "tf_serving_warmup_requests", std::ios::binary);
    garbage << "not a TFRecord file";
  }
  runtime rt;
  auto server = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, manual_polling());
  REQUIRE(server);
  auto status = (*server)->status("m", std::nullopt).value();
  REQUIRE(status.size() == 1);
  CHECK(status[0].state == version_state::end);
  CHECK_THAT(status[0].status.message, Catch::Contains("tf_serving_warmup_requests"));
  CHECK((*server)->predict({.name = "m"}, {{"x", some_rows(1)}}).error_value().code == errc::not_found);
}

TEST_CASE("a full queue refuses a request before it is decoded, and the refusal is counted", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  testing::save_version(scratch.path, 1, 1);
  runtime rt;
  auto options = manual_polling(true);
  options.batching.max_enqueued_batches = 2;  // 16 rows
  auto metrics = std::make_shared<serving_metrics>();
  auto server = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, options, metrics);
  REQUIRE(server);
  const model_spec spec{.name = "m"};
  CHECK((*server)->admit(spec));
  CHECK((*server)->admit({.name = "nosuch"}).error_value().code == errc::not_found);
  CHECK((*server)->admit({.name = "m", .version = 7}).error_value().code == errc::not_found);
  // A signature that only the body would name is left to predict_async.
  CHECK((*server)->admit({.name = "m", .signature_name = "other"}));

  // Clients that keep more full batches coming than the replica runs, until admit refuses one.
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&] {
      const tensor x = some_rows(8);
      while (!stop.load()) (void)(*server)->predict(spec, {{"x", x}});
    });
  std::optional<error> refusal;
  uint64_t refusals = 0;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       refusals < 3 && std::chrono::steady_clock::now() < until;) {
    if (auto admitted = (*server)->admit(spec); !admitted) {
      refusal = admitted.error_value();
      ++refusals;
    }
  }
  stop = true;
  for (auto& t : clients) t.join();
  REQUIRE(refusal);
  CHECK(refusal->code == errc::resource_exhausted);
  CHECK_THAT(refusal->message, Catch::Contains("model 'm' version 1 is full"));
  // Counted where the batcher counts its own refusals, and as answered requests.
  CHECK(metrics->series("m", 1, "serving_default", "resource_exhausted").count.load() >= refusals);
  CHECK(metrics->queues().front().stats.refused_full >= refusals);
  const std::string text = metrics->prometheus_text();
  CHECK_THAT(text, Catch::Contains(R"(actorflow_serving_refused_count{model="m",version="1",signature="serving_default",reason="queue_full"})"));
  CHECK_THAT(text, Catch::Contains(R"(actorflow_serving_batches_sent_ahead_count{model="m",version="1",signature="serving_default"})"));
  // Once the clients are gone the queue drains and takes requests again.
  for (int i = 0; i < 200 && !(*server)->admit(spec); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK((*server)->admit(spec));
}

TEST_CASE("reconfigure adds, keeps, moves and drops models without failing requests in flight", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  testing::save_version(scratch.path / "a", 1, 11);
  testing::save_version(scratch.path / "a", 2, 12);
  testing::save_version(scratch.path / "b", 1, 21);
  testing::save_version(scratch.path / "moved", 7, 70);
  runtime rt;
  auto server = model_server::start(rt, {{.name = "a", .base_path = (scratch.path / "a").string()}}, manual_polling());
  REQUIRE(server);
  auto& models = **server;
  const tensor x = some_rows(2);
  REQUIRE(models.predict({.name = "a"}, {{"x", x}})->version == 2);

  // Kept with a new policy and label, and one added.
  model_config a{.name = "a", .base_path = (scratch.path / "a").string()};
  a.policy = {.choice = version_policy::kind::specific, .specific_versions = {1}};
  a.version_labels = {{"stable", 1}};
  REQUIRE(models.reconfigure({a, {.name = "b", .base_path = (scratch.path / "b").string()}}));
  CHECK(models.predict({.name = "a", .version_label = "stable"}, {{"x", x}})->version == 1);
  CHECK(models.predict({.name = "a", .version = 2}, {{"x", x}}).error_value().code == errc::not_found);
  auto b = models.predict({.name = "b"}, {{"x", x}});
  REQUIRE(b);
  CHECK(all_close(b->outputs.front(), expected_output(21, x), 1e-6, 1e-6));

  // A new base path: its versions serve once loaded; the model left out is no longer served.
  model_config moved = a;
  moved.base_path = (scratch.path / "moved").string();
  moved.policy = {};
  moved.version_labels.clear();
  REQUIRE(models.reconfigure({moved}));
  auto after = models.predict({.name = "a"}, {{"x", x}});
  REQUIRE(after);
  CHECK(after->version == 7);
  CHECK(all_close(after->outputs.front(), expected_output(70, x), 1e-6, 1e-6));
  CHECK(models.predict({.name = "b"}, {{"x", x}}).error_value().code == errc::not_found);
  CHECK(models.model_names() == std::vector<std::string>{"a"});

  // A list start() would refuse changes nothing.
  auto refused = models.reconfigure({moved, moved});
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error_value().message, Catch::Contains("configured twice"));
  CHECK_FALSE(models.reconfigure({}));
  CHECK(models.predict({.name = "a"}, {{"x", x}})->version == 7);
}

TEST_CASE("the config watcher serves a changed model config file and keeps the old list for a bad one", "[serving]") {
  testing::scratch_dir scratch{"af_serving"};
  testing::save_version(scratch.path / "a", 1, 11);
  testing::save_version(scratch.path / "b", 1, 21);
  const auto file = scratch.path / "models.config";
  auto write = [&](const std::string& text) { std::ofstream{file} << text; };
  auto entry = [&](const std::string& name) {
    return "config { name: '" + name + "' base_path: '" + (scratch.path / name).string() + "' }\n";
  };
  write("model_config_list {\n" + entry("a") + "}\n");
  runtime rt;
  auto served = read_model_config(file.string());
  REQUIRE(served);
  auto server = model_server::start(rt, *served, manual_polling());
  REQUIRE(server);
  std::vector<std::string> reports;
  // No thread (interval 0): the test calls what the thread would call each interval.
  model_config_watcher watcher{**server, file.string(), *served, std::chrono::milliseconds(0),
                               [&](const std::string& line) { reports.push_back(line); }};
  CHECK_FALSE(watcher.check_now());  // unchanged
  CHECK(reports.empty());

  write("model_config_list {\n" + entry("a") + entry("b") + "}\n");
  CHECK(watcher.check_now());
  CHECK((*server)->predict({.name = "b"}, {{"x", some_rows(1)}}));
  REQUIRE(reports.size() == 1);
  CHECK_THAT(reports.back(), Catch::Contains("reloaded: serving a, b"));

  write("model_config_list {\n  config { name: 'a' base_path: \n}\n");  // half written
  CHECK_FALSE(watcher.check_now());
  CHECK_FALSE(watcher.check_now());
  REQUIRE(reports.size() == 2);  // reported once until the file changes
  CHECK_THAT(reports.back(), Catch::Contains("not reloaded") && Catch::Contains("models.config:"));
  CHECK((*server)->predict({.name = "b"}, {{"x", some_rows(1)}}));

  write("model_config_list {\n" + entry("b") + "}\n");
  CHECK(watcher.check_now());
  CHECK((*server)->predict({.name = "a"}, {{"x", some_rows(1)}}).error_value().code == errc::not_found);
}
