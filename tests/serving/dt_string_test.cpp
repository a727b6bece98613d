// DT_STRING over REST: strings and {"b64": ...} in, strings out (b64 for outputs named "*_bytes"
// and for bytes that are not UTF-8), every byte kept through batching; and graphs that carry
// strings through but never compute on them.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <thread>

#include "../support/scratch_dir.hpp"
#include "actors/runtime.hpp"
#include "actors/serving_types.hpp"
#include "apps/serving/http_server.hpp"
#include "apps/serving/inference.hpp"
#include "apps/serving/metrics.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/rest_codec.hpp"
#include "apps/serving/rest_fast_decode.hpp"
#include "ops/codegen/cpu_fused.hpp"
#include "ops/graph/fused_program.hpp"
#include "ops/op_registry.hpp"
#include "serving_fixtures.hpp"

using namespace af;
using namespace af::serving;
using Catch::Contains;
using json = nlohmann::json;

namespace {

struct keyed_server {
  testing::scratch_dir scratch{"af_dt_string"};
  runtime rt;
  std::shared_ptr<serving_metrics> metrics = std::make_shared<serving_metrics>();
  std::unique_ptr<model_server> models;
  std::unique_ptr<http_server> rest;

  explicit keyed_server(bool batching) {
    testing::save_keyed_model(scratch.path / "1");
    server_options options;
    options.enable_batching = batching;
    options.poll_interval = std::chrono::milliseconds(0);
    options.batching.max_batch_size = 8;
    options.batching.batch_timeout = std::chrono::milliseconds(2);
    options.batching.allowed_batch_sizes = {4, 8};  // batches padded with empty strings: cut off again
    models = model_server::start(rt, {{.name = "keyed", .base_path = scratch.path.string()}}, options, metrics).value();
    http_options http;
    http.port = 0;
    rest = http_server::start(*models, metrics, http).value();
  }
};

json predict(testing::http_client& client, const std::string& body, int want_status = 200) {
  auto answer = client.request("POST", "/v1/models/keyed:predict", body);
  INFO(answer.body);
  REQUIRE(answer.status == want_status);
  return json::parse(answer.body);
}

}  // namespace

TEST_CASE("a DT_STRING input comes back byte for byte over REST, b64 where TF Serving writes it", "[serving][string]") {
  keyed_server s{GENERATE(false, true)};
  testing::http_client client{s.rest->port()};

  SECTION("row format: text, b64 bytes and UTF-8") {
    const auto out = predict(client, R"({"instances": [{"x": [1, 2], "key": "row-a"},
                                                       {"x": [3, 4], "key": {"b64": "/wBh"}},
                                                       {"x": [0.5, 0], "key": "caf\u00e9 \"q\""}]})");
    const auto& p = out.at("predictions");
    REQUIRE(p.size() == 3);
    CHECK(p[0].at("squares") == json::array({1.0, 4.0}));
    CHECK(p[0].at("key") == "row-a");
    CHECK(p[0].at("key_bytes") == json{{"b64", "cm93LWE="}});  // "*_bytes" outputs are always b64
    CHECK(p[1].at("squares") == json::array({9.0, 16.0}));
    CHECK(p[1].at("key") == json{{"b64", "/wBh"}});  // 0xff 0x00 'a' is not UTF-8: b64, not broken JSON
    CHECK(p[1].at("key_bytes") == json{{"b64", "/wBh"}});
    CHECK(p[2].at("key") == "caf\u00e9 \"q\"");
  }

  SECTION("columnar format") {
    const auto out = predict(client, R"({"inputs": {"x": [[1, 1], [2, 2]], "key": ["k1", {"b64": "azI="}]}})");
    CHECK(out.at("outputs").at("key") == json::array({"k1", "k2"}));
    CHECK(out.at("outputs").at("key_bytes") == json::array({json{{"b64", "azE="}}, json{{"b64", "azI="}}}));
  }

  SECTION("concurrent callers each get their own keys back through the batches") {
    std::vector<std::thread> callers;
    std::atomic<int> matched{0};
    for (int c = 0; c < 4; ++c)
      callers.emplace_back([&, c] {
        testing::http_client own{s.rest->port()};
        for (int i = 0; i < 20; ++i) {
          const std::string key = "caller-" + std::to_string(c) + "-request-" + std::to_string(i) + std::string(40, 'k');
          auto answer = own.request("POST", "/v1/models/keyed:predict",
                                    R"({"instances": [{"x": [)" + std::to_string(c) + R"(, 1], "key": ")" + key + R"("}]})");
          if (answer.status != 200) continue;
          const auto p = json::parse(answer.body).at("predictions").at(0);
          if (p.at("key") == key && p.at("squares").at(0) == c * c) ++matched;
        }
      });
    for (auto& t : callers) t.join();
    CHECK(matched == 80);
  }

  SECTION("a value that is not a string is refused, naming where") {
    auto number = client.request("POST", "/v1/models/keyed:predict", R"({"instances": [{"x": [1, 2], "key": 7}]})");
    CHECK(number.status == 400);
    CHECK_THAT(number.body, Contains("instances[0]['key']") && Contains("DT_STRING"));
    auto bad_b64 = client.request("POST", "/v1/models/keyed:predict", R"({"instances": [{"x": [1, 2], "key": {"b64": "%%%"}}]})");
    CHECK(bad_b64.status == 400);
    CHECK_THAT(bad_b64.body, Contains("not base64"));
    auto text_for_number = client.request("POST", "/v1/models/keyed:predict", R"({"instances": [{"x": ["1", 2], "key": "k"}]})");
    CHECK(text_for_number.status == 400);
    // The server still answers.
    CHECK(predict(client, R"({"instances": [{"x": [1, 2], "key": "after"}]})").at("predictions")[0].at("key") == "after");
  }

  SECTION("the metadata names DT_STRING") {
    auto meta = client.request("GET", "/v1/models/keyed/metadata");
    REQUIRE(meta.status == 200);
    const auto inputs = json::parse(meta.body)["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"];
    CHECK(inputs.at("key").at("dtype") == "DT_STRING");
  }
}

TEST_CASE("the REST fast path leaves a DT_STRING signature to the general decoder", "[serving][string]") {
  const auto keys = std::make_shared<const graph::signature>(
      graph::signature{"serving_default", "f", {{"key", {dtype::string, {-1}}}}, {{"key", {dtype::string, {-1}}}}, {}});
  const signature_lookup lookup = [&](const std::string&) -> expected<std::shared_ptr<const graph::signature>> { return keys; };
  // Numbers the fast path would store as elements: declined, and the general path refuses them.
  CHECK_FALSE(decode_simple_predict(R"({"instances": [1, 2]})", lookup));
  auto numbers = decode_predict(R"({"instances": [1, 2]})", lookup);
  REQUIRE_FALSE(numbers);
  CHECK_THAT(numbers.error_value().message, Contains("DT_STRING"));
  auto strings = decode_predict(R"({"instances": ["a", {"b64": "Yg=="}]})", lookup);
  REQUIRE(strings);
  REQUIRE(strings->inputs.size() == 1);
  CHECK(strings->inputs[0].value.to_vector<std::string>() == std::vector<std::string>{"a", "b"});
}

TEST_CASE("graphs carry strings from parameters to outputs but no op computes on them", "[serving][string][graph]") {
  graph::graph_builder b;
  const auto key = b.parameter({dtype::string, {-1}}, "key");
  for (const char* op : {"neg", "relu", "exp"}) {
    auto refused = b.add(op, {key});
    REQUIRE_FALSE(refused);
    CHECK(refused.error_value().code == errc::dtype_mismatch);
    CHECK_THAT(refused.error_value().message, Contains(op) && Contains("string"));
  }
  const auto x = b.parameter({dtype::f32, {-1}}, "x");
  CHECK_FALSE(b.add("add", {x, key}));

  // A module with a string signature survives the SavedModel encoding.
  testing::scratch_dir scratch{"af_dt_string_graph"};
  testing::save_keyed_model(scratch.path / "1");
  auto loaded = saved_model::load((scratch.path / "1").string());
  REQUIRE(loaded);
  const auto* sig = loaded->find_signature("serving_default");
  REQUIRE(sig);
  REQUIRE(sig->inputs.size() == 2);
  CHECK(sig->inputs[1].type.type == dtype::string);
  CHECK(sig->outputs[2].name == "key_bytes");
  CHECK(sig->outputs[2].type.type == dtype::string);
}

TEST_CASE("no kernel reads a string: fused programs, eager ops and examples refuse them first", "[serving][string][graph]") {
  // A fused node in a (hostile) SavedModel with an input no step reads: the kernel would read it
  // as its own element type. Refused when the program is checked, and by the kernel itself.
  graph::fused_program unread;
  unread.inputs = {{dtype::f32, {-1}}, {dtype::string, {-1}}};
  unread.steps = {{"neg", {0}, {}, {dtype::f32, {-1}}}};
  auto checked = unread.verify(unread.inputs, {dtype::f32, {-1}});
  REQUIRE_FALSE(checked);
  CHECK_THAT(checked.error_value().message, Contains("input 1") && Contains("string"));
  graph::fused_program unread_int = unread;
  unread_int.inputs[1] = {dtype::i32, {-1}};
  CHECK_FALSE(unread_int.verify(unread_int.inputs, {dtype::f32, {-1}}));
  const tensor x = tensor::from_vector<float>({1, 2});
  auto ran = codegen::run_fused_cpu(unread, {x, tensor::from_vector(std::vector<std::string>{"a", "b"})}, nullptr);
  REQUIRE_FALSE(ran);
  CHECK(ran.error_value().code == errc::dtype_mismatch);
  CHECK_FALSE(codegen::run_fused_cpu(unread_int, {x, tensor::from_vector<int32_t>({1, 2})}, nullptr));

  // Eager ops, through the registry every eager call takes.
  const auto registry = default_op_registry();
  for (const char* op : {"neg", "where", "add"}) {
    std::vector<tensor> inputs(std::string_view{op} == "neg" ? 1 : std::string_view{op} == "add" ? 2 : 3,
                               tensor::from_vector(std::vector<std::string>{"a"}));
    auto refused = registry->run(op, inputs, {});
    REQUIRE_FALSE(refused);
    CHECK(refused.error_value().code == errc::dtype_mismatch);
  }

  // Examples: a DT_STRING input is refused before anything is allocated, and a shared context
  // feature cannot multiply a small request into a huge input.
  graph::signature keyed{"classify", "f", {{"key", {dtype::string, {-1}}}}, {{"scores", {dtype::f32, {-1, 2}}}}, {}};
  example_batch batch;
  batch.examples.resize(3);
  auto strings = inputs_from_examples(batch, keyed);
  REQUIRE_FALSE(strings);
  CHECK_THAT(strings.error_value().message, Contains("'key' is DT_STRING"));
  graph::signature wide{"classify", "f", {{"x", {dtype::f32, {-1, -1}}}}, {{"scores", {dtype::f32, {-1, 2}}}}, {}};
  example_batch amplified;
  amplified.context = {{"x", {.what = feature_values::kind::floats, .floats = std::vector<float>(1 << 16, 1.0f)}}};
  amplified.examples.resize(2048);  // 2048 x 65536 floats = 512 MiB from a 256 KiB context
  auto huge = inputs_from_examples(amplified, wide);
  REQUIRE_FALSE(huge);
  CHECK_THAT(huge.error_value().message, Contains("2048 examples x 65536 values"));
  amplified.examples.resize(8);
  CHECK(inputs_from_examples(amplified, wide));
}

TEST_CASE("the actor endpoint's signature text keeps DT_STRING", "[serving][string]") {
  graph::signature keyed{"serving_default", "f", {{"key", {dtype::string, {-1}}}}, {{"key", {dtype::string, {-1}}}}, {}};
  auto back = decode_signatures(encode_signatures({keyed}));
  REQUIRE(back);
  REQUIRE(back->size() == 1);
  CHECK((*back)[0].inputs[0].type == graph::value_type{dtype::string, {-1}});
}
