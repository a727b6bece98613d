// The REST front end as a TensorFlow Serving client sees it: the request formats (row, columnar,
// named inputs, b64), the answers' shapes and numbers, status and metadata documents, errors with
// TF Serving's statuses naming what was wrong, keep-alive, the body limit, the bearer token and the
// Prometheus metrics.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <poll.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "../support/scratch_dir.hpp"
#include "actors/runtime.hpp"
#include "apps/serving/http_server.hpp"
#include "apps/serving/metrics.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/rest_codec.hpp"
#include "apps/serving/rest_fast_decode.hpp"
#include "serving_fixtures.hpp"

using namespace af;
using namespace af::serving;
using json = nlohmann::json;

namespace {

std::shared_ptr<const graph::signature> signature_of(std::vector<graph::tensor_spec> inputs) {
  return std::make_shared<const graph::signature>(graph::signature{"serving_default", "f", std::move(inputs), {}, {}});
}

signature_lookup fixed(std::shared_ptr<const graph::signature> sig) {
  return [sig](const std::string& name) -> expected<std::shared_ptr<const graph::signature>> {
    if (!name.empty() && name != sig->name) return make_error(errc::not_found, "no signature '" + name + "'");
    return sig;
  };
}

const graph::tensor_spec x_spec{"x", graph::value_type{dtype::f32, {-1, 2}}};
const graph::tensor_spec ids_spec{"ids", graph::value_type{dtype::i64, {-1}}};

}  // namespace

TEST_CASE("predict bodies decode in TF Serving's row and columnar formats", "[serving][rest]") {
  auto one = fixed(signature_of({x_spec}));
  auto rows = decode_predict(R"({"instances": [[1, 2], [3.5, -4]]})", one);
  REQUIRE(rows);
  CHECK(rows->row_format);
  CHECK(rows->inputs.front().value.to_vector<float>() == std::vector<float>{1, 2, 3.5f, -4});
  CHECK(rows->inputs.front().value.shape() == shape{2, 2});

  auto columns = decode_predict(R"({"signature_name": "serving_default", "inputs": [[1, 2], [3, 4], [5, 6]]})", one);
  REQUIRE(columns);
  CHECK_FALSE(columns->row_format);
  CHECK(columns->inputs.front().value.shape() == shape{3, 2});

  auto two = fixed(signature_of({x_spec, ids_spec}));
  auto named = decode_predict(R"({"instances": [{"x": [1, 2], "ids": 7}, {"ids": 9007199254740993, "x": [3, 4]}]})", two);
  REQUIRE(named);
  CHECK(named->inputs[1].value.to_vector<int64_t>() == std::vector<int64_t>{7, 9007199254740993});  // > 2^53: exact
  auto named_columns = decode_predict(R"({"inputs": {"x": [[1, 2]], "ids": [5]}})", two);
  REQUIRE(named_columns);
  CHECK(named_columns->inputs[0].name == "x");

  // b64: the bytes of a row, in the input's dtype.
  const float row[2] = {1.5f, -2.0f};
  const std::string b64 = base64_encode(std::string_view{reinterpret_cast<const char*>(row), sizeof row});
  auto binary = decode_predict(R"({"instances": [{"b64": ")" + b64 + R"("}]})", one);
  REQUIRE(binary);
  CHECK(binary->inputs.front().value.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
}

TEST_CASE("bad predict bodies are refused with the field and position that is wrong", "[serving][rest]") {
  auto one = fixed(signature_of({x_spec}));
  auto two = fixed(signature_of({x_spec, ids_spec}));
  auto refused = [](expected<rest_predict_request> r) {
    REQUIRE_FALSE(r);
    return r.error_value().message;
  };
  CHECK_THAT(refused(decode_predict("{\"instances\": [", one)), Catch::Contains("not valid JSON"));
  CHECK_THAT(refused(decode_predict(R"([1, 2])", one)), Catch::Contains("JSON object"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [[1,2]], "inputs": [[1,2]]})", one)), Catch::Contains("exactly one"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [[1,2], [3]]})", one)), Catch::Contains("instances[1]"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [[1,2,3]]})", one)), Catch::Contains("instances[0]"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [["a", 2]]})", one)), Catch::Contains("string"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [[1,2]]})", two)), Catch::Contains("2 inputs"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [{"x": [1,2]}]})", two)), Catch::Contains("lacks input 'ids'"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [{"x": [1,2], "ids": 1, "z": 0}]})", two)), Catch::Contains("'z'"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [{"b64": "!!!"}]})", one)), Catch::Contains("base64"));
  CHECK_THAT(refused(decode_predict(R"({"instances": [{"b64": "AAAA"}]})", one)), Catch::Contains("bytes"));
  CHECK(decode_predict(R"({"signature_name": "other", "instances": [[1,2]]})", one).error_value().code == errc::not_found);
}

TEST_CASE("answers are written as TF Serving writes them, floats in their shortest exact form", "[serving][rest]") {
  auto sig = std::make_shared<const graph::signature>(graph::signature{
      "serving_default", "f", {x_spec}, {{"p", graph::value_type{dtype::f32, {-1, 2}}}, {"k", graph::value_type{dtype::i64, {-1}}}}, {}});
  prediction answer{"m", 1, sig, {tensor::from_vector<float>({0.1f, 1e-8f, 3.0f, -0.0f}, {2, 2}), tensor::from_vector<int64_t>({4, 5}, {2})}};
  CHECK(encode_predict(answer, true) == R"({"predictions":[{"p":[0.1,1e-08],"k":4},{"p":[3,-0],"k":5}]})");
  CHECK(encode_predict(answer, false) == R"({"outputs":{"p":[[0.1,1e-08],[3,-0]],"k":[4,5]}})");
  prediction single{"m", 1, signature_of({x_spec}), {tensor::from_vector<float>({0.5f, 2.0f}, {1, 2})}};
  CHECK(encode_predict(single, true) == R"({"predictions":[[0.5,2]]})");
  CHECK(json::parse(encode_predict(answer, true))["predictions"][0]["p"][0].get<float>() == 0.1f);
  CHECK(http_status_for(errc::resource_exhausted) == 429);
  CHECK(http_status_for(errc::timeout) == 504);
  CHECK(http_status_for(errc::not_found) == 404);
  CHECK(http_status_for(errc::invalid_argument) == 400);
}

TEST_CASE("the REST server answers TF Serving's API over kept-alive connections", "[serving][rest]") {
  testing::scratch_dir scratch{"af_rest"};
  testing::save_version(scratch.path, 1, 1);
  testing::save_version(scratch.path, 4, 4);
  runtime rt;
  server_options options;
  options.enable_batching = true;
  options.poll_interval = std::chrono::milliseconds(0);
  options.batching.max_batch_size = 4;
  auto metrics = std::make_shared<serving_metrics>();
  auto models = model_server::start(rt, {{.name = "dense", .base_path = scratch.path.string(),
                                          .policy = {.choice = version_policy::kind::all}, .version_labels = {{"stable", 1}}}},
                                    options, metrics);
  REQUIRE(models);
  http_options http;
  http.port = 0;
  http.max_body_bytes = 4096;
  auto rest = http_server::start(**models, metrics, http);
  REQUIRE(rest);
  testing::http_client client{(*rest)->port()};

  auto status = client.request("GET", "/v1/models/dense");
  REQUIRE(status.status == 200);
  auto doc = json::parse(status.body);
  CHECK(doc["model_version_status"].size() == 2);
  CHECK(doc["model_version_status"][0]["version"] == "4");
  CHECK(doc["model_version_status"][0]["state"] == "AVAILABLE");
  CHECK(doc["model_version_status"][0]["status"]["error_code"] == "OK");
  CHECK(json::parse(client.request("GET", "/v1/models/dense/versions/1").body)["model_version_status"].size() == 1);

  auto metadata = client.request("GET", "/v1/models/dense/metadata");
  REQUIRE(metadata.status == 200);
  auto meta = json::parse(metadata.body);
  CHECK(meta["model_spec"]["version"] == "4");
  auto& def = meta["metadata"]["signature_def"]["signature_def"]["serving_default"];
  CHECK(def["inputs"]["x"]["dtype"] == "DT_FLOAT");
  CHECK(def["inputs"]["x"]["tensor_shape"]["dim"][1]["size"] == "4");
  CHECK(def["outputs"]["y"]["dtype"] == "DT_FLOAT");

  const tensor x = tensor::from_vector<float>({1, 2, 3, 4, -1, 0, 0.5f, 2}, {2, 4});
  const auto want4 = testing::small_dense(4).predict_on_batch({x}).value().front().to_vector<float>();
  const auto want1 = testing::small_dense(1).predict_on_batch({x}).value().front().to_vector<float>();
  const std::string body = R"({"instances": [[1, 2, 3, 4], [-1, 0, 0.5, 2]]})";
  auto check_rows = [](const json& predictions, const std::vector<float>& want) {
    REQUIRE(predictions.size() == 2);
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t c = 0; c < 3; ++c) CHECK(predictions[r][c].get<float>() == want[r * 3 + c]);
  };
  auto latest = client.request("POST", "/v1/models/dense:predict", body);
  REQUIRE(latest.status == 200);
  check_rows(json::parse(latest.body)["predictions"], want4);
  auto by_version = client.request("POST", "/v1/models/dense/versions/1:predict", body);
  REQUIRE(by_version.status == 200);
  check_rows(json::parse(by_version.body)["predictions"], want1);
  auto by_label = client.request("POST", "/v1/models/dense/labels/stable:predict", body);
  REQUIRE(by_label.status == 200);
  check_rows(json::parse(by_label.body)["predictions"], want1);
  auto columnar = client.request("POST", "/v1/models/dense:predict", R"({"inputs": {"x": [[1, 2, 3, 4], [-1, 0, 0.5, 2]]}})");
  REQUIRE(columnar.status == 200);
  check_rows(json::parse(columnar.body)["outputs"], want4);

  SECTION("errors carry TF Serving's statuses and say what was wrong") {
    auto error_of = [](const testing::http_answer& a) { return json::parse(a.body)["error"].get<std::string>(); };
    auto unknown = client.request("POST", "/v1/models/other:predict", body);
    CHECK(unknown.status == 404);
    CHECK_THAT(error_of(unknown), Catch::Contains("other"));
    CHECK(client.request("POST", "/v1/models/dense/versions/9:predict", body).status == 404);
    auto bad = client.request("POST", "/v1/models/dense:predict", R"({"instances": [[1, 2, 3]]})");
    CHECK(bad.status == 400);
    CHECK_THAT(error_of(bad), Catch::Contains("instances[0]"));
    CHECK(client.request("POST", "/v1/models/dense:classify", body).status == 400);
    // TF Serving's answers: the wrong method or a path under /v1/ that names nothing is a
    // malformed request; a path outside /v1/ is not found; an unknown signature is the client's.
    auto wrong_method = client.request("GET", "/v1/models/dense:predict");
    CHECK(wrong_method.status == 400);
    CHECK_THAT(error_of(wrong_method), Catch::Contains("Malformed request: GET /v1/models/dense:predict"));
    CHECK(client.request("POST", "/v1/models/dense").status == 400);
    CHECK(client.request("GET", "/v1/models/dense/versions/x").status == 400);
    CHECK(client.request("GET", "/v1/models/dense:frobnicate").status == 400);
    CHECK(client.request("GET", "/v2/anything").status == 404);
    auto no_signature = client.request("POST", "/v1/models/dense:predict", R"({"signature_name": "nope", "instances": [[1, 2, 3, 4]]})");
    CHECK(no_signature.status == 400);
    CHECK_THAT(error_of(no_signature), Catch::Contains("\"nope\" not found"));
    // A deadline that has passed when the request reaches the queue: 504, without running.
    auto late = client.request("POST", "/v1/models/dense:predict", body, "X-Request-Timeout-Ms: 0\r\n");
    CHECK(late.status == 504);
    CHECK_THAT(error_of(late), Catch::Contains("deadline"));
    CHECK(client.request("POST", "/v1/models/dense:predict", body, "X-Request-Timeout-Ms: soon\r\n").status == 400);
    CHECK(client.request("POST", "/v1/models/dense:predict", body, "X-Request-Timeout-Ms: 60000\r\n").status == 200);
    // Still the same connection: errors keep it alive.
    CHECK(client.request("POST", "/v1/models/dense:predict", body).status == 200);
    // A body over the limit is refused and the connection closed.
    auto big = client.request("POST", "/v1/models/dense:predict", std::string(8192, ' '));
    CHECK(big.status == 413);
    CHECK(client.closed_by_server());
  }

  SECTION("metrics count requests, outcomes, batches and loads in Prometheus' format") {
    client.request("POST", "/v1/models/other:predict", body);
    auto scraped = client.request("GET", "/monitoring/prometheus/metrics");
    REQUIRE(scraped.status == 200);
    CHECK_THAT(scraped.headers, Catch::Contains("text/plain"));
    CHECK_THAT(scraped.body, Catch::Contains(R"(actorflow_serving_request_count{model="dense",version="4",signature="serving_default",outcome="OK"} 2)"));
    CHECK_THAT(scraped.body, Catch::Contains(R"(actorflow_serving_request_latency_seconds_bucket{model="dense",version="4",signature="serving_default",outcome="OK",le="+Inf"} 2)"));
    CHECK_THAT(scraped.body, Catch::Contains(R"(actorflow_serving_model_load_count{model="dense",version="4",outcome="loaded"} 1)"));
    CHECK_THAT(scraped.body, Catch::Contains(R"(actorflow_serving_queue_rows{model="dense",version="4",signature="serving_default"} 0)"));
    CHECK_THAT(scraped.body, Catch::Contains("# TYPE actorflow_serving_batch_size histogram"));
    // TF Serving's names beside ours: the same requests by model and status, latency in µs.
    CHECK_THAT(scraped.body, Catch::Contains("# TYPE :tensorflow:serving:request_count counter"));
    const auto ok_line = scraped.body.find(R"(:tensorflow:serving:request_count{model_name="dense",status="OK"} )");
    REQUIRE(ok_line != std::string::npos);
    const auto ok_count = std::stoll(scraped.body.substr(scraped.body.find("} ", ok_line) + 2));
    int64_t ours = 0;
    for (std::size_t at = 0; (at = scraped.body.find("actorflow_serving_request_count{model=\"dense\"", at)) != std::string::npos; ++at) {
      const auto line = scraped.body.substr(at, scraped.body.find('\n', at) - at);
      if (line.find(R"(outcome="OK")") != std::string::npos) ours += std::stoll(line.substr(line.rfind(' ') + 1));
    }
    CHECK(ok_count == ours);
    CHECK(ok_count >= 4);
    CHECK_THAT(scraped.body, Catch::Contains(R"(:tensorflow:serving:request_latency_bucket{model_name="dense",le="100"} )") &&
                                 Catch::Contains(R"(:tensorflow:serving:request_latency_count{model_name="dense"} )"));
  }
}

TEST_CASE("the metrics path is the monitoring config's, and empty turns them off", "[serving][rest]") {
  testing::scratch_dir scratch{"af_rest"};
  testing::save_version(scratch.path, 1, 1);
  runtime rt;
  server_options options;
  options.poll_interval = std::chrono::milliseconds(0);
  auto models = model_server::start(rt, {{.name = "dense", .base_path = scratch.path.string()}}, options);
  REQUIRE(models);
  auto metrics = std::make_shared<serving_metrics>();
  http_options moved;
  moved.port = 0;
  moved.metrics_path = "/metrics";
  auto rest = http_server::start(**models, metrics, moved);
  REQUIRE(rest);
  testing::http_client client{(*rest)->port()};
  CHECK(client.request("GET", "/metrics").status == 200);
  CHECK(client.request("GET", "/monitoring/prometheus/metrics").status == 404);
  http_options off;
  off.port = 0;
  off.metrics_path.clear();
  auto quiet = http_server::start(**models, metrics, off);
  REQUIRE(quiet);
  testing::http_client other{(*quiet)->port()};
  CHECK(other.request("GET", "/monitoring/prometheus/metrics").status == 404);
  CHECK(other.request("GET", "/v1/models/dense").status == 200);
}

// Version 1 of the dense test model behind a model server that neither batches nor polls.
struct single_model {
  testing::scratch_dir scratch{"af_rest"};
  runtime rt;
  std::unique_ptr<model_server> models;

  single_model() {
    testing::save_version(scratch.path, 1, 1);
    server_options options;
    options.poll_interval = std::chrono::milliseconds(0);
    auto started = model_server::start(rt, {{.name = "dense", .base_path = scratch.path.string()}}, options);
    REQUIRE(started);
    models = std::move(*started);
  }
};

TEST_CASE("a REST server with a bearer token refuses requests without it", "[serving][rest]") {
  single_model served;
  http_options http;
  http.port = 0;
  http.bearer_token = "s3cret";
  auto rest = http_server::start(*served.models, nullptr, http);
  REQUIRE(rest);
  testing::http_client client{(*rest)->port()};
  auto without = client.request("GET", "/v1/models/dense");
  CHECK(without.status == 401);
  CHECK_THAT(without.headers, Catch::Contains("Bearer"));
  CHECK(client.request("GET", "/v1/models/dense", "", "Authorization: Bearer wrong\r\n").status == 401);
  CHECK(client.request("GET", "/v1/models/dense", "", "Authorization: Bearer s3cret\r\n").status == 200);
  // Another port taken: a clear error naming it.
  http.port = (*rest)->port();
  auto clash = http_server::start(*served.models, nullptr, http);
  REQUIRE_FALSE(clash);
  CHECK_THAT(clash.error_value().message, Catch::Contains(std::to_string(http.port)));
}

TEST_CASE("the common body decodes without a JSON document to the same values as the general path", "[serving][rest]") {
  const graph::tensor_spec wide{"x", graph::value_type{dtype::f32, {-1, 400}}};
  auto lookup = fixed(signature_of({wide}));
  std::mt19937_64 rng(7);
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    char buf[64];
    switch (i % 5) {
      case 0: std::snprintf(buf, sizeof buf, "0.%03d", static_cast<int>(rng() % 1000)); break;
      case 1: std::snprintf(buf, sizeof buf, "%.17g", std::uniform_real_distribution<double>(-1e3, 1e3)(rng)); break;
      case 2: std::snprintf(buf, sizeof buf, "%de%d", static_cast<int>(rng() % 2000) - 1000, static_cast<int>(rng() % 60) - 30); break;
      case 3: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(rng() % 100000) - 50000); break;
      default: std::snprintf(buf, sizeof buf, "%.6e", std::uniform_real_distribution<double>(-1, 1)(rng) * 1e-25); break;
    }
    texts.push_back(buf);
  }
  std::string row = "[";
  for (std::size_t i = 0; i < texts.size(); ++i) row += (i ? ", " : "") + texts[i];
  row += "]";
  const std::string body = "{\"instances\": [" + row + ", " + row + "]}";
  auto simple = decode_simple_predict(body, lookup);
  REQUIRE(simple);
  auto general = decode_predict(body, lookup);
  REQUIRE(general);
  const auto a = simple->inputs[0].value.to_vector<float>();
  const auto b = general->inputs[0].value.to_vector<float>();
  REQUIRE(a.size() == 800);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    INFO(texts[i]);
    CHECK(std::memcmp(&a[i], &b[i], sizeof(float)) == 0);
    CHECK(a[i] == static_cast<float>(std::strtod(texts[i].c_str(), nullptr)));
  }
  // Anything irregular is left to the general path (which names the problem).
  CHECK_FALSE(decode_simple_predict(R"({"instances": [[1, 2], [3]]})", lookup));
  CHECK_FALSE(decode_simple_predict(R"({"instances": [{"x": [1]}]})", lookup));
  CHECK_FALSE(decode_simple_predict(R"({"instances": [[1, NaN]]})", lookup));
  CHECK_FALSE(decode_simple_predict(R"({"instances": [[1, 2]], "extra": 1})", lookup));
  CHECK_FALSE(decode_simple_predict(R"({"instances": [[1, [2]]]})", lookup));
  CHECK_FALSE(decode_simple_predict(R"({"instances": [[[1], 2]]})", lookup));

  // Integers keep every digit, beyond 2^53 too (where a double would round them).
  auto integers = fixed(signature_of({{"ids", graph::value_type{dtype::i64, {-1, 6}}}}));
  const std::string ids = R"({"instances": [[9007199254740993, -5, 0, 123456789012345678, -9223372036854775807, 7]]})";
  auto simple_ids = decode_simple_predict(ids, integers);
  REQUIRE(simple_ids);
  CHECK(simple_ids->inputs[0].value.to_vector<int64_t>() ==
        std::vector<int64_t>{9007199254740993, -5, 0, 123456789012345678, -9223372036854775807, 7});
  auto general_ids = decode_predict(ids, integers);
  REQUIRE(general_ids);
  CHECK(general_ids->inputs[0].value.to_vector<int64_t>() == simple_ids->inputs[0].value.to_vector<int64_t>());
}

namespace {

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// Whether the server closes `fd` within `limit` (the read sees end of stream or a reset).
bool closed_within(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) != 1) return false;
  char byte;
  return ::recv(fd, &byte, 1, 0) <= 0;
}

}  // namespace

TEST_CASE("a REST server closes connections idle or stalled mid-request past its timeout, and only those", "[serving][rest][timing]") {
  single_model served;
  http_options http;
  http.port = 0;
  http.threads = 2;
  http.idle_timeout = std::chrono::seconds(1);
  auto rest = http_server::start(*served.models, nullptr, http);
  REQUIRE(rest);
  const uint16_t port = (*rest)->port();
  const int silent = connect_to(port);
  const int stalled = connect_to(port);
  const std::string half = "POST /v1/models/dense:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inst";
  REQUIRE(::send(stalled, half.data(), half.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(half.size()));
  testing::http_client busy{port};
  const auto started = std::chrono::steady_clock::now();
  // A connection that keeps asking stays open the whole time.
  while (std::chrono::steady_clock::now() - started < std::chrono::milliseconds(2600)) {
    REQUIRE(busy.request("GET", "/v1/models/dense").status == 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // The timeout (1 s) plus at most one sweep period (1 s) have passed: both are gone by now.
  CHECK(closed_within(silent, std::chrono::milliseconds(500)));
  CHECK(closed_within(stalled, std::chrono::milliseconds(500)));
  CHECK(busy.request("GET", "/v1/models/dense").status == 200);
  ::close(silent);
  ::close(stalled);
}

namespace {

void send_all(int fd, const std::string& bytes) {
  for (std::size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    sent += static_cast<std::size_t>(n);
  }
}

// The next `count` answers on `fd`, framed by their Content-Length; fewer when the server closes.
std::vector<testing::http_answer> read_answers(int fd, std::size_t count) {
  std::vector<testing::http_answer> answers;
  std::string pending;
  char buf[65536];
  while (answers.size() < count) {
    const auto header_end = pending.find("\r\n\r\n");
    if (header_end != std::string::npos) {
      testing::http_answer a;
      a.headers = pending.substr(0, header_end);
      a.status = std::stoi(a.headers.substr(9, 3));
      const auto at = a.headers.find("Content-Length: ");
      REQUIRE(at != std::string::npos);
      const std::size_t length = std::stoul(a.headers.substr(at + 16));
      if (pending.size() >= header_end + 4 + length) {
        a.body = pending.substr(header_end + 4, length);
        pending.erase(0, header_end + 4 + length);
        answers.push_back(std::move(a));
        continue;
      }
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
  }
  return answers;
}

std::string raw_request(const std::string& request_line, const std::string& headers, const std::string& body = "") {
  return request_line + "\r\nHost: x\r\n" + headers + (body.empty() ? "" : "Content-Length: " + std::to_string(body.size()) + "\r\n") +
         "\r\n" + body;
}

}  // namespace

TEST_CASE("the REST server keeps HTTP/1.0 and 1.1 connection rules and answers pipelined requests in order", "[serving][rest]") {
  single_model served;
  http_options http;
  http.port = 0;
  auto rest = http_server::start(*served.models, nullptr, http);
  REQUIRE(rest);
  const uint16_t port = (*rest)->port();

  SECTION("HTTP/1.0 closes unless asked to keep the connection") {
    const int fd = connect_to(port);
    send_all(fd, raw_request("GET /v1/models/dense HTTP/1.0", ""));
    auto answers = read_answers(fd, 1);
    REQUIRE(answers.size() == 1);
    CHECK(answers[0].headers.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
    CHECK(answers[0].headers.find("Connection") == std::string::npos);
    CHECK(closed_within(fd, std::chrono::milliseconds(2000)));
    ::close(fd);

    const int kept = connect_to(port);
    for (int i = 0; i < 2; ++i) {
      send_all(kept, raw_request("GET /v1/models/dense HTTP/1.0", "Connection: keep-alive\r\n"));
      answers = read_answers(kept, 1);
      REQUIRE(answers.size() == 1);
      CHECK(answers[0].status == 200);
      CHECK(answers[0].headers.find("Connection: keep-alive") != std::string::npos);
    }
    ::close(kept);
  }

  SECTION("HTTP/1.1 keeps the connection unless the client closes it, errors included") {
    const int fd = connect_to(port);
    send_all(fd, raw_request("GET /v1/models/nothing HTTP/1.1", ""));
    auto answers = read_answers(fd, 1);
    REQUIRE(answers.size() == 1);
    CHECK(answers[0].headers.rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);
    CHECK(answers[0].headers.find("Connection") == std::string::npos);
    CHECK(answers[0].headers.find("Content-Type: application/json") != std::string::npos);
    CHECK_THAT(answers[0].body, Catch::Contains("nothing"));
    send_all(fd, raw_request("GET /v1/models/dense HTTP/1.1", "Connection: close\r\n"));
    answers = read_answers(fd, 1);
    REQUIRE(answers.size() == 1);
    CHECK(answers[0].status == 200);
    CHECK(answers[0].headers.find("Connection: close") != std::string::npos);
    CHECK(closed_within(fd, std::chrono::milliseconds(2000)));
    ::close(fd);
  }

  SECTION("requests sent back to back, one larger than the read buffer, are answered one by one in order") {
    // 30 rows spaced out to a body of about 40 KB, more than a connection reads at once.
    std::string rows;
    for (int r = 0; r < 30; ++r) rows += std::string{r ? "," : ""} + std::string(1300, ' ') + "[1, 2, 3, " + std::to_string(r) + "]";
    const std::string big = "{\"instances\": [" + rows + "]}";
    const std::string small = R"({"instances": [[1, 2, 3, 4]]})";
    const std::string post = "POST /v1/models/dense:predict HTTP/1.1";
    const std::string json_type = "Content-Type: application/json\r\n";
    const int fd = connect_to(port);
    send_all(fd, raw_request(post, json_type, small) + raw_request(post, json_type, big) + raw_request("GET /v1/models/dense HTTP/1.1", "") +
                     raw_request(post, json_type, R"({"instances": [[1, 2]]})") + raw_request(post, json_type, small));
    const auto answers = read_answers(fd, 5);
    REQUIRE(answers.size() == 5);
    CHECK(answers[0].status == 200);
    CHECK(json::parse(answers[0].body)["predictions"].size() == 1);
    CHECK(answers[1].status == 200);
    CHECK(json::parse(answers[1].body)["predictions"].size() == 30);
    CHECK(answers[2].status == 200);
    CHECK(json::parse(answers[2].body).contains("model_version_status"));
    CHECK(answers[3].status == 400);
    CHECK(answers[4].status == 200);
    CHECK(answers[4].body == answers[0].body);
    ::close(fd);
  }
}

TEST_CASE("REST :classify and :regress answer as TF Serving, and the metadata names the methods", "[serving][rest][inference]") {
  testing::scratch_dir scratch{"af_rest"};
  testing::save_inference_model(scratch.path / "1");
  runtime rt;
  server_options options;
  options.poll_interval = std::chrono::milliseconds(0);
  auto models = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, options);
  REQUIRE(models);
  http_options http;
  http.port = 0;
  auto rest = http_server::start(**models, nullptr, http);
  REQUIRE(rest);
  testing::http_client client{(*rest)->port()};

  const std::string examples = R"("examples": [{"x": [0.5, -1.0, 2.0, 0.25]}, {"x": [-0.5, 1.0, 0.0, 3.0]}])";
  auto classified = client.request("POST", "/v1/models/m:classify", "{" + examples + "}");
  REQUIRE(classified.status == 200);
  const auto results = json::parse(classified.body)["results"];
  auto scores = (*models)->predict({.name = "m", .signature_name = "predict"},
                                   {{"x", tensor::from_vector<float>({0.5f, -1, 2, 0.25f, -0.5f, 1, 0, 3}, {2, 4})}});
  REQUIRE(scores);
  REQUIRE(results.size() == 2);
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(results[r].size() == 3);
    for (std::size_t c = 0; c < 3; ++c) {
      CHECK(results[r][c][0] == "");
      CHECK(results[r][c][1].get<float>() == scores->outputs[0].data<float>()[r * 3 + c]);
    }
  }
  auto regressed = client.request("POST", "/v1/models/m/versions/1:regress", R"({"signature_name": "regress", )" + examples + "}");
  REQUIRE(regressed.status == 200);
  CHECK(json::parse(regressed.body)["results"].size() == 2);

  auto wrong = client.request("POST", "/v1/models/m:regress", "{" + examples + "}");  // serving_default classifies
  CHECK(wrong.status == 400);
  CHECK_THAT(wrong.body, Catch::Contains("Expected regression signature method_name"));
  CHECK(client.request("POST", "/v1/models/m:classify", R"({"examples": [{"y": [1.0]}]})").status == 400);
  CHECK(client.request("POST", "/v1/models/m:classify", R"({"signature_name": "nope", )" + examples + "}").status == 400);
  CHECK(client.request("GET", "/v1/models/m:classify").status == 400);

  auto meta = json::parse(client.request("GET", "/v1/models/m/metadata").body)["metadata"]["signature_def"]["signature_def"];
  CHECK(meta["serving_default"]["method_name"] == "tensorflow/serving/classify");
  CHECK(meta["regress"]["method_name"] == "tensorflow/serving/regress");
  CHECK(meta["predict"]["method_name"] == "tensorflow/serving/predict");
}
