// `actorflow serve` itself (the binary, as an operator starts it) against hostile requests over
// REST and gRPC: one of each class of input that once crashed a server or made it allocate by a
// client's word (nesting 100,000 deep, a shape larger than the body, a TensorProto broadcasting one
// value to billions of elements, numbers outside their dtype, a timeout of 2^63 ms, a body larger
// than the limit, callers without the token). After all of them the server still answers a valid
// request, and its peak memory stayed within a bound.

#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <string>

#include "actors/runtime.hpp"
#include "actors/serving_client.hpp"
#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/classification.pb.h"
#include "tensorflow_serving/apis/inference.pb.h"
#include "tensorflow_serving/apis/regression.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"
#include "served_binary.hpp"

using namespace af;
using namespace af::testing;
namespace tfs = tensorflow::serving;

namespace {

const std::string auth_header = std::string{"Authorization: Bearer "} + served::token + "\r\n";
const std::string valid_body = R"({"instances": [[1.0, 2.0, 3.0, 4.0]]})";

std::string error_of(const http_answer& a) { return a.body; }

tfs::PredictRequest predict_request(tensorflow::TensorProto x) {
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("dense");
  (*request.mutable_inputs())["x"] = std::move(x);
  return request;
}

tensorflow::TensorProto float_tensor(std::vector<int64_t> dims, std::vector<float> values) {
  tensorflow::TensorProto t;
  t.set_dtype(tensorflow::DT_FLOAT);
  for (int64_t d : dims) t.mutable_tensor_shape()->add_dim()->set_size(d);
  for (float v : values) t.add_float_val(v);
  return t;
}

grpc::Status call(tfs::PredictionService::Stub& stub, const tfs::PredictRequest& request, bool with_token = true) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (with_token) ctx.AddMetadata("authorization", std::string{"Bearer "} + served::token);
  tfs::PredictResponse response;
  return stub.Predict(&ctx, request, &response);
}

}  // namespace

TEST_CASE("actorflow serve survives hostile REST and gRPC requests and still answers", "[serve][hostile]") {
  served s;
  const long rss_before = s.peak_rss_kib();
  REQUIRE(rss_before > 0);
  http_client rest{static_cast<uint16_t>(s.rest)};
  auto post = [&](const std::string& body, const std::string& headers = "") {
    return rest.request("POST", "/v1/models/dense:predict", body, auth_header + headers);
  };
  REQUIRE(post(valid_body).status == 200);
  // Without batching, no row cap (as in TF Serving): 100 rows are one request's right.
  std::string hundred = R"({"instances": [)";
  for (int i = 0; i < 100; ++i) hundred += std::string{i ? "," : ""} + "[1, 2, 3, 4]";
  auto many = post(hundred + "]}");
  CHECK(many.status == 200);
  CHECK(std::count(many.body.begin(), many.body.end(), '[') == 101);

  SECTION("REST") {
    // Arrays nested 100,000 deep: refused by name, in both the fast and the general decoder.
    const std::string deep = R"({"instances": )" + std::string(100000, '[') + "1" + std::string(100000, ']') + "}";
    auto nested = post(deep);
    CHECK(nested.status == 400);
    CHECK_THAT(error_of(nested), Catch::Contains("nests arrays and objects more than 64 deep"));
    auto nested_objects = post(R"({"instances": [)" + [] {
      std::string o;
      for (int i = 0; i < 50000; ++i) o += R"({"a":)";
      return o + "1" + std::string(50000, '}');
    }() + "]}");
    CHECK(nested_objects.status == 400);
    // A first row that claims a shape the rest of the body does not carry.
    std::string claim = R"({"inputs": [[)";
    for (int i = 0; i < 4; ++i) claim += (i ? "," : "") + std::string{"1"};
    claim += "]";
    for (int i = 0; i < 60000; ++i) claim += ",[]";
    claim += "]}";
    auto ragged = post(claim);
    CHECK(ragged.status == 400);
    // Numbers outside f32, and malformed ones.
    auto overflow = post(R"({"instances": [[1e39, 0, 0, 0]]})");
    CHECK(overflow.status == 400);
    CHECK_THAT(error_of(overflow), Catch::Contains("does not fit DT_FLOAT"));
    CHECK(post(R"({"instances": [[01, 2, 3, 4]]})").status == 400);
    CHECK(post(R"({"instances": [[{"b64": "!!!!"}]]})").status == 400);
    CHECK(post(R"({"instances": [[1, 2, 3]]})").status == 400);
    CHECK(post(R"({"instances": [[1, 2, 3, 4], [1, 2, 3]]})").status == 400);
    // A timeout of 2^63 - 1 ms is clamped, not overflowed; a negative or non-number one refused.
    CHECK(post(valid_body, "X-Request-Timeout-Ms: 9223372036854775807\r\n").status == 200);
    CHECK(post(valid_body, "X-Request-Timeout-Ms: 99999999999999999999\r\n").status == 400);
    CHECK(post(valid_body, "X-Request-Timeout-Ms: -5\r\n").status == 400);
    // A declared body over the limit is refused from the head, and the connection closed.
    const std::string answer = send_raw(s.rest, "POST /v1/models/dense:predict HTTP/1.1\r\nHost: x\r\n" + auth_header +
                                                    "Content-Length: 999999999999\r\n\r\n");
    CHECK_THAT(answer, Catch::StartsWith("HTTP/1.1 413"));
    // The token is checked from the head too: a caller without it sends no body in vain.
    CHECK_THAT(send_raw(s.rest, "POST /v1/models/dense:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 900000\r\n\r\n"),
               Catch::StartsWith("HTTP/1.1 401"));
    // :classify and :regress decode the same hostile bodies by the same bounds, and a predict
    // signature is not called as a classifier.
    auto classify = [&](const std::string& body) { return rest.request("POST", "/v1/models/dense:classify", body, auth_header); };
    CHECK_THAT(error_of(classify(R"({"examples": )" + std::string(100000, '[') + std::string(100000, ']') + "}")),
               Catch::Contains("nests arrays and objects more than 64 deep"));
    CHECK(classify(R"({"examples": [{"x": [1e39]}]})").status == 400);
    CHECK(classify(R"({"examples": [{"x": 18446744073709551615}]})").status == 400);
    auto not_a_classifier = classify(R"({"examples": [{"x": [1.0, 2.0, 3.0, 4.0]}]})");
    CHECK(not_a_classifier.status == 400);
    CHECK_THAT(error_of(not_a_classifier), Catch::Contains("Expected classification signature method_name"));
    // Garbage instead of HTTP.
    {
      http_client other{static_cast<uint16_t>(s.rest)};
      auto junk = other.request("\x01\x02\x03", "\xff");
      CHECK((junk.status == 400 || junk.status == 0));
    }
  }

  SECTION("gRPC") {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(s.grpc), grpc::InsecureChannelCredentials());
    auto stub = tfs::PredictionService::NewStub(channel);
    REQUIRE(call(*stub, predict_request(float_tensor({1, 4}, {1, 2, 3, 4}))).ok());
    // One float_val declared to fill 2^31 x 4 elements: refused before anything is allocated.
    auto broadcast = call(*stub, predict_request(float_tensor({int64_t{1} << 31, 4}, {1.0f})));
    CHECK(broadcast.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(broadcast.error_message(), Catch::Contains("more than the 1048576 bytes"));
    // A shape the signature does not take, an input it does not have, a dtype it does not take.
    auto wrong_shape = call(*stub, predict_request(float_tensor({1, 5}, {1, 2, 3, 4, 5})));
    CHECK(wrong_shape.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(wrong_shape.error_message(), Catch::Contains("where the signature takes f32[-1,4]"));
    auto renamed = predict_request(float_tensor({1, 4}, {1, 2, 3, 4}));
    (*renamed.mutable_inputs())["z"] = renamed.inputs().at("x");
    CHECK(call(*stub, renamed).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    tensorflow::TensorProto ints;
    ints.set_dtype(tensorflow::DT_INT8);
    ints.mutable_tensor_shape()->add_dim()->set_size(1);
    ints.mutable_tensor_shape()->add_dim()->set_size(4);
    for (int v : {1000, 2, 3, 4}) ints.add_int_val(v);
    CHECK(call(*stub, predict_request(ints)).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    // tensor_content that does not match the declared shape; a negative dimension.
    auto short_content = float_tensor({1, 4}, {});
    short_content.set_tensor_content(std::string(12, '\0'));
    CHECK(call(*stub, predict_request(short_content)).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(call(*stub, predict_request(float_tensor({-1, 4}, {1}))).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    // Classify on 50,000 empty examples, and MultiInference on 20,000 copies of one task.
    tfs::ClassificationRequest classify;
    classify.mutable_model_spec()->set_name("dense");
    for (int i = 0; i < 50000; ++i) classify.mutable_input()->mutable_example_list()->add_examples();
    {
      grpc::ClientContext c;
      c.AddMetadata("authorization", std::string{"Bearer "} + served::token);
      tfs::ClassificationResponse r;
      CHECK(stub->Classify(&c, classify, &r).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    }
    tfs::MultiInferenceRequest multi;
    for (int i = 0; i < 20000; ++i) {
      auto* task = multi.add_tasks();
      task->mutable_model_spec()->set_name("dense");
      task->set_method_name("tensorflow/serving/classify");
    }
    {
      grpc::ClientContext c;
      c.AddMetadata("authorization", std::string{"Bearer "} + served::token);
      tfs::MultiInferenceResponse r;
      const auto refused = stub->MultiInference(&c, multi, &r);
      CHECK((refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT || refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED));
    }
    // A message over the limit.
    auto huge = float_tensor({1, 4}, {});
    huge.set_tensor_content(std::string(2 << 20, '\0'));
    CHECK(call(*stub, predict_request(huge)).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  // Still serving, on both front ends, and memory stayed within a bound (ASan's shadow included)
  // where the broadcast alone would have asked for 32 GiB.
  REQUIRE(s.alive());
  http_client again{static_cast<uint16_t>(s.rest)};
  CHECK(again.request("POST", "/v1/models/dense:predict", valid_body, auth_header).status == 200);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(s.grpc), grpc::InsecureChannelCredentials());
  CHECK(call(*tfs::PredictionService::NewStub(channel), predict_request(float_tensor({1, 4}, {1, 2, 3, 4}))).ok());
  const long rss_after = s.peak_rss_kib();
  INFO("peak RSS before " << rss_before << " KiB, after " << rss_after << " KiB");
  CHECK(rss_after - rss_before < 256 * 1024);
  CHECK(s.stop() == 0);
}

TEST_CASE("actorflow serve refuses hostile DT_STRING requests and still answers", "[serve][hostile][string]") {
  // The keyed model (x: f32[-1,2], key: string[-1]; outputs squares, key, key_bytes), served as "dense".
  served s{{}, [](const std::filesystem::path& version) { save_keyed_model(version); }};
  const long rss_before = s.peak_rss_kib();
  http_client rest{static_cast<uint16_t>(s.rest)};
  auto post = [&](const std::string& body) { return rest.request("POST", "/v1/models/dense:predict", body, auth_header); };
  const std::string good = R"({"instances": [{"x": [1, 2], "key": "k"}]})";
  REQUIRE(post(good).status == 200);

  // REST: a number, an array, an object and bad base64 where a string belongs; 300,000 keys for one row of x.
  CHECK(post(R"({"instances": [{"x": [1, 2], "key": 7}]})").status == 400);
  CHECK(post(R"({"instances": [{"x": [1, 2], "key": ["a"]}]})").status == 400);
  CHECK(post(R"({"instances": [{"x": [1, 2], "key": {"text": "a"}}]})").status == 400);
  CHECK(post(R"({"instances": [{"x": [1, 2], "key": {"b64": "!!"}}]})").status == 400);
  std::string keys = R"({"inputs": {"x": [[1, 2]], "key": [)";
  for (int i = 0; i < 300000; ++i) keys += i ? ",\"\"" : "\"\"";
  CHECK(post(keys + "]}}").status == 400);

  // gRPC: one string broadcast to 2^31 elements, strings as tensor_content, too few string_val.
  auto stub = tfs::PredictionService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(s.grpc), grpc::InsecureChannelCredentials()));
  auto keyed = [](tensorflow::TensorProto key) {
    auto request = predict_request(float_tensor({1, 2}, {1, 2}));
    (*request.mutable_inputs())["key"] = std::move(key);
    return request;
  };
  auto strings = [](int64_t n) {
    tensorflow::TensorProto t;
    t.set_dtype(tensorflow::DT_STRING);
    t.mutable_tensor_shape()->add_dim()->set_size(n);
    return t;
  };
  auto one = strings(1);
  one.add_string_val("k");
  REQUIRE(call(*stub, keyed(one)).ok());
  auto broadcast = strings(int64_t{1} << 31);
  broadcast.add_string_val(std::string(1000, 'b'));
  auto refused = call(*stub, keyed(broadcast));
  CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(refused.error_message(), Catch::Contains("one string_val value would fill"));
  auto content = strings(1);
  content.set_tensor_content(std::string(32, 'A'));  // a std::string's bytes: never taken
  CHECK(call(*stub, keyed(content)).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  auto too_few = strings(3);
  too_few.add_string_val("a");
  too_few.add_string_val("b");
  CHECK(call(*stub, keyed(too_few)).error_code() == grpc::StatusCode::INVALID_ARGUMENT);

  REQUIRE(s.alive());
  CHECK(post(good).status == 200);
  CHECK(call(*stub, keyed(one)).ok());
  CHECK(s.peak_rss_kib() - rss_before < 256 * 1024);
  CHECK(s.stop() == 0);
}

TEST_CASE("with a token, every front end of actorflow serve refuses a caller without it", "[serve][auth]") {
  served s;
  // REST: 401 and a WWW-Authenticate challenge without the token, or with a wrong one.
  http_client rest{static_cast<uint16_t>(s.rest)};
  auto bare = rest.request("POST", "/v1/models/dense:predict", valid_body);
  CHECK(bare.status == 401);
  CHECK_THAT(bare.headers, Catch::Contains("WWW-Authenticate: Bearer"));
  CHECK(rest.request("GET", "/v1/models/dense", "", "Authorization: Bearer wrong\r\n").status == 401);
  CHECK(rest.request("GET", "/monitoring/prometheus/metrics").status == 401);
  CHECK(rest.request("POST", "/v1/models/dense:classify", R"({"examples": [{"x": [1.0]}]})").status == 401);
  CHECK(rest.request("POST", "/v1/models/dense:predict", valid_body, auth_header).status == 200);

  // gRPC: UNAUTHENTICATED on every method without the metadata.
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(s.grpc), grpc::InsecureChannelCredentials());
  auto predictions = tfs::PredictionService::NewStub(channel);
  auto management = tfs::ModelService::NewStub(channel);
  const auto request = predict_request(float_tensor({1, 4}, {1, 2, 3, 4}));
  CHECK(call(*predictions, request, false).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong");
    tfs::GetModelStatusRequest status_request;
    status_request.mutable_model_spec()->set_name("dense");
    tfs::GetModelStatusResponse status_response;
    CHECK(management->GetModelStatus(&ctx, status_request, &status_response).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    tfs::GetModelMetadataRequest metadata_request;
    metadata_request.mutable_model_spec()->set_name("dense");
    metadata_request.add_metadata_field("signature_def");
    tfs::GetModelMetadataResponse metadata_response;
    CHECK(predictions->GetModelMetadata(&ctx, metadata_request, &metadata_response).error_code() ==
          grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext classify_ctx, regress_ctx, multi_ctx;
    tfs::ClassificationRequest classify;
    classify.mutable_model_spec()->set_name("dense");
    tfs::ClassificationResponse classified;
    CHECK(predictions->Classify(&classify_ctx, classify, &classified).error_code() == grpc::StatusCode::UNAUTHENTICATED);
    tfs::RegressionRequest regress;
    regress.mutable_model_spec()->set_name("dense");
    tfs::RegressionResponse regressed;
    CHECK(predictions->Regress(&regress_ctx, regress, &regressed).error_code() == grpc::StatusCode::UNAUTHENTICATED);
    tfs::MultiInferenceRequest multi;
    tfs::MultiInferenceResponse both;
    CHECK(predictions->MultiInference(&multi_ctx, multi, &both).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  }
  CHECK(call(*predictions, request).ok());

  // The actor endpoint: a client without the token is refused at connect, one with it served.
  runtime rt{{.network = true}};
  auto without = serving::client::connect(rt, "127.0.0.1", static_cast<uint16_t>(s.actor), std::chrono::seconds(10));
  REQUIRE_FALSE(without);
  CHECK(without.error_value().code == errc::protocol_violation);
  auto with = serving::client::connect(rt, "127.0.0.1", static_cast<uint16_t>(s.actor), std::chrono::seconds(10), served::token);
  REQUIRE(with);
  auto answer = with->predict({.name = "dense"}, {{"x", tensor::from_vector<float>({1, 2, 3, 4}, {1, 4})}});
  REQUIRE(answer);
  CHECK(answer->outputs.at(0).value.dim(1) == 3);
  CHECK(s.stop() == 0);
}
