// Classify, Regress and MultiInference: tf.Examples into a signature's inputs, its outputs into TF
// Serving's results, the REST bodies, and the model server running a model saved with classify
// and regress signatures.

#include <catch2/catch.hpp>

#include <future>

#include <nlohmann/json.hpp>

#include "../support/scratch_dir.hpp"
#include "actors/runtime.hpp"
#include "apps/serving/inference.hpp"
#include "apps/serving/rest_inference.hpp"
#include "serving_fixtures.hpp"

using namespace af;
using namespace af::serving;
using Catch::Contains;
using json = nlohmann::json;

namespace {

feature_values floats(std::vector<float> v) { return {.what = feature_values::kind::floats, .floats = std::move(v)}; }
feature_values ints(std::vector<int64_t> v) { return {.what = feature_values::kind::ints, .ints = std::move(v)}; }

// x: f32[-1,2], k: i32[-1]; a classification over them.
graph::signature two_inputs() {
  graph::signature s{"classify", "f", {{"x", {dtype::f32, {-1, 2}}}, {"k", {dtype::i32, {-1}}}}, {{"scores", {dtype::f32, {-1, 3}}}}, {}};
  s.method_name = std::string{graph::classify_method};
  return s;
}

std::string refusal(const expected<std::vector<named_tensor>>& r) {
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::invalid_argument);
  return r.error_value().message;
}

}  // namespace

TEST_CASE("examples fill a signature's inputs one row each, the context standing in", "[serving][inference]") {
  const auto sig = two_inputs();
  example_batch batch;
  batch.context = {{"k", ints({9})}};
  batch.examples = {{{"x", floats({1, 2})}}, {{"x", floats({3, 4})}, {"k", ints({-5})}}};
  auto inputs = inputs_from_examples(batch, sig);
  REQUIRE(inputs);
  REQUIRE(inputs->size() == 2);
  CHECK((*inputs)[0].name == "x");
  CHECK((*inputs)[0].value.shape() == shape{2, 2});
  CHECK(std::vector<float>((*inputs)[0].value.data<float>(), (*inputs)[0].value.data<float>() + 4) == std::vector<float>{1, 2, 3, 4});
  CHECK((*inputs)[1].value.shape() == shape{2});
  CHECK((*inputs)[1].value.data<int32_t>()[0] == 9);   // from the context
  CHECK((*inputs)[1].value.data<int32_t>()[1] == -5);  // the example's own

  SECTION("what does not fit is refused, naming the example and the feature") {
    example_batch bad = batch;
    bad.examples[1].erase("x");
    CHECK_THAT(refusal(inputs_from_examples(bad, sig)), Contains("example 1: feature 'x' is missing"));
    bad = batch;
    bad.examples[1]["x"] = floats({3, 4, 5});
    CHECK_THAT(refusal(inputs_from_examples(bad, sig)), Contains("example 1: feature 'x' holds 3 values") && Contains("takes 2"));
    bad = batch;
    bad.examples[0]["x"] = ints({1, 2});
    CHECK_THAT(refusal(inputs_from_examples(bad, sig)), Contains("example 0: feature 'x' holds int64 values") && Contains("float"));
    bad = batch;
    bad.examples[0]["k"] = ints({int64_t{1} << 40});
    CHECK_THAT(refusal(inputs_from_examples(bad, sig)), Contains("example 0: feature 'k' value 0 does not fit i32"));
    bad = batch;
    bad.examples[0]["k"] = {.what = feature_values::kind::bytes, .bytes = 1};
    CHECK_THAT(refusal(inputs_from_examples(bad, sig)), Contains("holds bytes"));
    CHECK_THAT(refusal(inputs_from_examples(example_batch{}, sig)), Contains("Input is empty"));
  }

  SECTION("an open dimension takes its size from the first example, and the rest must follow") {
    graph::signature open = sig;
    open.inputs = {{"x", {dtype::f32, {-1, -1}}}};
    example_batch rows;
    rows.examples = {{{"x", floats({1, 2, 3})}}, {{"x", floats({4, 5, 6})}}};
    auto filled = inputs_from_examples(rows, open);
    REQUIRE(filled);
    CHECK(filled->front().value.shape() == shape{2, 3});
    rows.examples[1]["x"] = floats({4, 5});
    CHECK_THAT(refusal(inputs_from_examples(rows, open)), Contains("example 1: feature 'x' holds 2 values"));
  }
}

TEST_CASE("a signature answers only the method it was saved as, in TF Serving's words", "[serving][inference]") {
  auto sig = two_inputs();
  CHECK(check_method(sig, inference_method::classify));
  auto wrong = check_method(sig, inference_method::regress);
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.error_value().message,
             Contains("Expected regression signature method_name to be tensorflow/serving/regress. Was: tensorflow/serving/classify"));
  sig.method_name.clear();
  CHECK_THAT(check_method(sig, inference_method::classify).error_value().message, Contains("Was: tensorflow/serving/predict"));
  CHECK(parse_method_name("tensorflow/serving/regress").value() == inference_method::regress);
  CHECK_THAT(parse_method_name("tensorflow/serving/predict").error_value().message, Contains("Unsupported signature method_name"));
}

TEST_CASE("outputs become TF Serving's classes and regressions", "[serving][inference]") {
  auto sig = std::make_shared<graph::signature>(
      graph::signature{"c", "f", {}, {{"classes", {dtype::i64, {-1, 2}}}, {"scores", {dtype::f32, {-1, 2}}}}, {}});
  prediction done{"m", 4, sig, {tensor::from_vector<int64_t>({7, 3, 1, 0}, {2, 2}), tensor::from_vector<float>({0.75f, 0.25f, 0.5f, 0.5f}, {2, 2})}};
  auto answer = answer_of(done, inference_method::classify);
  REQUIRE(answer);
  CHECK(answer->version == 4);
  REQUIRE(answer->classes.size() == 2);
  CHECK(answer->classes[0][0].label == "7");
  CHECK(answer->classes[0][0].score == 0.75f);
  CHECK(answer->classes[1][1].label == "0");
  CHECK(json::parse(encode_classification(*answer)) == json::parse(R"({"results": [[["7", 0.75], ["3", 0.25]], [["1", 0.5], ["0", 0.5]]]})"));

  auto reg = std::make_shared<graph::signature>(graph::signature{"r", "f", {}, {{"outputs", {dtype::f32, {-1, 1}}}}, {}});
  auto values = answer_of(prediction{"m", 1, reg, {tensor::from_vector<float>({1.5f, -2}, {2, 1})}}, inference_method::regress);
  REQUIRE(values);
  CHECK(values->values == std::vector<float>{1.5f, -2});
  CHECK(json::parse(encode_regression(*values)) == json::parse(R"({"results": [1.5, -2.0]})"));
}

TEST_CASE("REST classify and regress bodies decode by TF Serving's rules", "[serving][inference][rest]") {
  auto r = decode_inference(R"({"signature_name": "s", "context": {"k": 3},
                                "examples": [{"x": [1.5, 2.0], "flag": true, "tag": "a"}, {"x": [0.5, 1e3], "tag": {"b64": "YWJj"}}]})");
  REQUIRE(r);
  CHECK(r->signature_name == "s");
  REQUIRE(r->batch.examples.size() == 2);
  CHECK(r->batch.context.at("k").ints == std::vector<int64_t>{3});
  CHECK(r->batch.examples[0].at("x").floats == std::vector<float>{1.5f, 2.0f});
  CHECK(r->batch.examples[0].at("flag").ints == std::vector<int64_t>{1});
  CHECK(r->batch.examples[1].at("tag").what == feature_values::kind::bytes);

  auto refused = [](std::string_view body) {
    auto d = decode_inference(body);
    REQUIRE_FALSE(d);
    CHECK(d.error_value().code == errc::invalid_argument);
    return d.error_value().message;
  };
  CHECK_THAT(refused(R"({"instances": [1]})"), Contains("'examples'"));
  CHECK_THAT(refused(R"({"examples": []})"), Contains("empty"));
  CHECK_THAT(refused(R"({"examples": [[1]]})"), Contains("examples[0] must be a JSON object"));
  CHECK_THAT(refused(R"({"examples": [{"x": [1.5, 2]}]})"), Contains("examples[0]['x'][1]") && Contains("int64") && Contains("float"));
  CHECK_THAT(refused(R"({"examples": [{"x": [[1.5]]}]})"), Contains("examples[0]['x'][0]") && Contains("array"));
  CHECK_THAT(refused(R"({"examples": [{"x": null}]})"), Contains("null"));
  CHECK_THAT(refused(R"({"examples": [{"x": 1e39}]})"), Contains("does not fit a float"));
  CHECK_THAT(refused(R"({"examples": [{"x": 18446744073709551615}]})"), Contains("uint64"));
  CHECK_THAT(refused(R"({"examples": [{"x": {"b64": "!!"}}]})"), Contains("base64"));
  CHECK_THAT(refused(std::string(100, '[')), Contains("nests"));
  CHECK_THAT(refused("{"), Contains("not valid JSON"));
}

namespace {

expected<inference_answer> infer(model_server& models, const model_spec& spec, inference_method method, example_batch batch) {
  std::promise<expected<inference_answer>> done;
  infer_async(models, spec, method, std::make_shared<const example_batch>(std::move(batch)), std::nullopt,
              [&](expected<inference_answer> answer) { done.set_value(std::move(answer)); });
  return done.get_future().get();
}

expected<std::vector<inference_answer>> multi_infer(model_server& models, std::vector<inference_task> tasks, example_batch batch) {
  std::promise<expected<std::vector<inference_answer>>> done;
  multi_infer_async(models, std::move(tasks), std::make_shared<const example_batch>(std::move(batch)), std::nullopt,
                    [&](expected<std::vector<inference_answer>> answers) { done.set_value(std::move(answers)); });
  return done.get_future().get();
}

}  // namespace

TEST_CASE("a model saved with classify and regress signatures answers them as predict does", "[serving][inference]") {
  testing::scratch_dir scratch{"af_inference"};
  testing::save_inference_model(scratch.path / "1");
  runtime rt;
  server_options options;
  options.enable_batching = GENERATE(false, true);
  options.poll_interval = std::chrono::milliseconds(0);
  auto server = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, options);
  REQUIRE(server);
  auto& models = **server;

  example_batch batch;
  const std::vector<float> x{0.5f, -1, 2, 0.25f, -0.5f, 1, 0, 3};
  batch.examples = {{{"x", floats({x.begin(), x.begin() + 4})}}, {{"x", floats({x.begin() + 4, x.end()})}}};
  const tensor rows = tensor::from_vector<float>(x, {2, 4});

  auto classified = infer(models, {.name = "m"}, inference_method::classify, batch);
  REQUIRE(classified);
  CHECK(classified->signature_name == "serving_default");
  CHECK(classified->version == 1);
  auto scores = models.predict({.name = "m", .signature_name = "predict"}, {{"x", rows}});
  REQUIRE(scores);
  REQUIRE(classified->classes.size() == 2);
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(classified->classes[r].size() == 3);
    float total = 0;
    for (std::size_t c = 0; c < 3; ++c) {
      CHECK(classified->classes[r][c].label.empty());  // no "classes" output: TF Serving leaves labels empty
      CHECK(classified->classes[r][c].score == Approx(scores->outputs[0].data<float>()[r * 3 + c]).margin(1e-6));
      total += classified->classes[r][c].score;
    }
    CHECK(total == Approx(1.0f).margin(1e-5));  // softmax
  }

  auto regressed = infer(models, {.name = "m", .signature_name = "regress"}, inference_method::regress, batch);
  REQUIRE(regressed);
  CHECK(regressed->values.size() == 2);

  SECTION("MultiInference runs each task on the same examples, in the tasks' order") {
    auto both = multi_infer(models,
                            {{{.name = "m", .signature_name = "regress"}, inference_method::regress},
                             {{.name = "m", .signature_name = "classify"}, inference_method::classify}},
                            batch);
    REQUIRE(both);
    REQUIRE(both->size() == 2);
    CHECK((*both)[0].values == regressed->values);
    CHECK((*both)[1].signature_name == "classify");
    CHECK((*both)[1].classes[1][2].score == classified->classes[1][2].score);

    auto twice = multi_infer(models,
                             {{{.name = "m", .signature_name = "classify"}, inference_method::classify},
                              {{.name = "m", .signature_name = "classify"}, inference_method::classify}},
                             batch);
    CHECK_THAT(twice.error_value().message, Contains("Duplicate evaluation of signature: classify"));
    auto two_models = multi_infer(models,
                                  {{{.name = "m", .signature_name = "classify"}, inference_method::classify},
                                   {{.name = "n", .signature_name = "regress"}, inference_method::regress}},
                                  batch);
    CHECK_THAT(two_models.error_value().message, Contains("same model name"));
    CHECK_THAT(multi_infer(models, {}, batch).error_value().message, Contains("at least one task"));
  }

  SECTION("the wrong method, an unknown signature or model, and bad examples are refused") {
    auto wrong = infer(models, {.name = "m", .signature_name = "regress"}, inference_method::classify, batch);
    CHECK(wrong.error_value().code == errc::invalid_argument);
    CHECK_THAT(wrong.error_value().message, Contains("Expected classification signature"));
    CHECK(infer(models, {.name = "m", .signature_name = "nope"}, inference_method::classify, batch).error_value().code ==
          errc::failed_precondition);
    CHECK(infer(models, {.name = "nope"}, inference_method::classify, batch).error_value().code == errc::not_found);
    example_batch missing = batch;
    missing.examples[1].clear();
    CHECK_THAT(infer(models, {.name = "m"}, inference_method::classify, missing).error_value().message, Contains("example 1: feature 'x'"));
  }
}

TEST_CASE("a context feature cannot make examples fill more than 256 MiB", "[serving][inference]") {
  // One context feature of 16 MiB stands in for every example: 17 empty examples would declare
  // 272 MiB from a request of 16 MB. Refused before anything is allocated; 2 examples are filled.
  const int64_t per_row = int64_t{1} << 22;
  graph::signature sig{"regress", "f", {{"x", {dtype::f32, {-1, per_row}}}}, {{"outputs", {dtype::f32, {-1}}}}, {}};
  sig.method_name = std::string{graph::regress_method};
  example_batch batch;
  batch.context = {{"x", floats(std::vector<float>(static_cast<std::size_t>(per_row), 1.0f))}};
  batch.examples.resize(17);
  CHECK_THAT(refusal(inputs_from_examples(batch, sig)),
             Contains("input 'x' would be 17 examples x 4194304 values, over the 256 MiB that examples may fill"));
  batch.examples.resize(2);
  auto inputs = inputs_from_examples(batch, sig);
  REQUIRE(inputs);
  CHECK((*inputs)[0].value.shape() == shape{2, per_row});
}
