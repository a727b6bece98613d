// The gRPC front end and TF Serving's file formats: every dtype survives a trip through a
// TensorProto in either encoding and bad ones are refused naming the input; batching and model
// config files parse, and their errors name the line; recorded warmup requests are read for their
// signature; a real server on a free port answers Predict, GetModelMetadata and GetModelStatus
// through generated stubs with TF Serving's messages and status codes.

#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../support/eventually.hpp"
#include "../support/scratch_dir.hpp"
#include "actors/runtime.hpp"
#include "apps/serving/grpc_server.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/serving_config.hpp"
#include "apps/serving/tensor_proto.hpp"
#include "apps/serving/warmup_records.hpp"
#include "serialization/tfrecord.hpp"
#include "serving_fixtures.hpp"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/classification.pb.h"
#include "tensorflow_serving/apis/inference.pb.h"
#include "tensorflow_serving/apis/prediction_log.pb.h"
#include "tensorflow_serving/apis/regression.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

using namespace af;
using namespace af::serving;
using namespace std::chrono_literals;
namespace tfs = tensorflow::serving;

namespace {

// A 2x3 tensor of `type` with distinct values, negative ones where the type has them.
tensor sample(dtype type) {
  std::vector<double> v{-3.5, 0.0, 1.0, 2.25, 100.0, -0.125};
  if (type == dtype::u8) v = {0, 1, 2, 127, 200, 255};
  if (type == dtype::i8) v = {-128, -1, 0, 1, 64, 127};
  if (type == dtype::i32 || type == dtype::i64) v = {-2000000000, -1, 0, 1, 7, 2000000000};
  if (type == dtype::boolean) v = {1, 0, 0, 1, 1, 0};
  tensor t = tensor::empty({2, 3}, type).value();
  for (std::size_t i = 0; i < v.size(); ++i)
    store_from_double(static_cast<char*>(t.raw_data()) + i * size_of(type), type, v[i]);
  return t;
}

const dtype all_dtypes[] = {dtype::f32, dtype::f64, dtype::f16, dtype::bf16, dtype::i8,
                            dtype::u8,  dtype::i32, dtype::i64, dtype::boolean};

std::string write_file(const testing::scratch_dir& dir, const std::string& name, const std::string& text) {
  std::ofstream{dir.file(name)} << text;
  return dir.file(name);
}

tensor some_rows(int64_t rows) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows * 4; ++i) v.push_back(0.25f * static_cast<float>(i % 7) - 0.5f);
  return tensor::from_vector<float>(v, {rows, 4});
}

tensorflow::TensorProto proto_of(const tensor& t, tensor_encoding encoding = tensor_encoding::content) {
  tensorflow::TensorProto p;
  REQUIRE(to_tensor_proto(t, p, encoding));
  return p;
}

}  // namespace

// -- TensorProto ------------------------------------------------------------------------------------

TEST_CASE("every dtype survives a TensorProto in both encodings", "[serving][grpc]") {
  const auto encoding = GENERATE(tensor_encoding::content, tensor_encoding::typed);
  for (dtype type : all_dtypes) {
    INFO(to_string(type) << (encoding == tensor_encoding::content ? " as tensor_content" : " as typed values"));
    const tensor t = sample(type);
    const auto p = proto_of(t, encoding);
    CHECK(p.dtype() == to_tf_dtype(type));
    REQUIRE(p.tensor_shape().dim_size() == 2);
    CHECK(p.tensor_shape().dim(1).size() == 3);
    CHECK(p.tensor_content().empty() == (encoding == tensor_encoding::typed));
    auto back = from_tensor_proto(p, "x");
    REQUIRE(back);
    CHECK(all_equal(*back, t));
    // A strided view goes out as its elements in row-major order.
    const tensor transposed = t.transpose().value();
    CHECK(all_equal(from_tensor_proto(proto_of(transposed, encoding), "x").value(), transposed.contiguous().value()));
  }
}

TEST_CASE("TensorProto dtypes carry TensorFlow's numbers", "[serving][grpc]") {
  CHECK(to_tf_dtype(dtype::f32) == 1);
  CHECK(to_tf_dtype(dtype::f64) == 2);
  CHECK(to_tf_dtype(dtype::i32) == 3);
  CHECK(to_tf_dtype(dtype::u8) == 4);
  CHECK(to_tf_dtype(dtype::i8) == 6);
  CHECK(to_tf_dtype(dtype::i64) == 9);
  CHECK(to_tf_dtype(dtype::boolean) == 10);
  CHECK(to_tf_dtype(dtype::bf16) == 14);
  CHECK(to_tf_dtype(dtype::f16) == 19);
  CHECK(tf_dtype_name(7) == "DT_STRING");
}

TEST_CASE("a single typed value fills the whole shape, as TensorFlow broadcasts it", "[serving][grpc]") {
  tensorflow::TensorProto p;
  p.set_dtype(tensorflow::DT_FLOAT);
  p.mutable_tensor_shape()->add_dim()->set_size(2);
  p.mutable_tensor_shape()->add_dim()->set_size(3);
  p.add_float_val(1.5f);
  auto t = from_tensor_proto(p, "x");
  REQUIRE(t);
  CHECK(all_equal(*t, tensor::full({2, 3}, 1.5, dtype::f32).value()));

  tensorflow::TensorProto scalar;
  scalar.set_dtype(tensorflow::DT_INT64);
  scalar.add_int64_val(int64_t{1} << 60);  // beyond double's 53 bits: kept exact
  auto s = from_tensor_proto(scalar, "n");
  REQUIRE(s);
  CHECK(s->ndim() == 0);
  CHECK(s->to_vector<int64_t>() == std::vector<int64_t>{int64_t{1} << 60});
}

TEST_CASE("bad TensorProtos are refused naming the input", "[serving][grpc]") {
  auto base = [] {
    tensorflow::TensorProto p;
    p.set_dtype(tensorflow::DT_FLOAT);
    p.mutable_tensor_shape()->add_dim()->set_size(2);
    p.mutable_tensor_shape()->add_dim()->set_size(3);
    return p;
  };
  auto refused = [](const tensorflow::TensorProto& p, errc code, const std::string& words) {
    auto t = from_tensor_proto(p, "images");
    REQUIRE_FALSE(t);
    CHECK(t.error_value().code == code);
    CHECK_THAT(t.error_value().message, Catch::Contains("'images'") && Catch::Contains(words));
  };
  SECTION("strings: as many string_val as elements, or one; never tensor_content") {
    auto p = base();
    p.set_dtype(tensorflow::DT_STRING);
    p.add_string_val("a");
    p.add_string_val("b");
    refused(p, errc::invalid_argument, "string_val holds 2 values for 6 elements");
    p.clear_string_val();
    p.set_tensor_content(std::string(6 * sizeof(std::string), 'A'));
    refused(p, errc::invalid_argument, "DT_STRING values go in string_val");
  }
  SECTION("a type TensorFlow does not define") {
    auto p = base();
    p.set_dtype(static_cast<tensorflow::DataType>(77));
    refused(p, errc::unknown_dtype, "DT_77");
  }
  SECTION("packed bytes of the wrong size") {
    auto p = base();
    p.set_tensor_content(std::string(20, '\0'));
    refused(p, errc::invalid_argument, "tensor_content holds 20 bytes");
  }
  SECTION("a typed field with neither one value nor one per element") {
    auto p = base();
    for (int i = 0; i < 4; ++i) p.add_float_val(1.0f);
    refused(p, errc::invalid_argument, "float_val holds 4 values for 6 elements");
  }
  SECTION("no values at all") {
    refused(base(), errc::invalid_argument, "float_val holds 0 values");
  }
  SECTION("an integer out of its dtype's range") {
    auto p = base();
    p.set_dtype(tensorflow::DT_UINT8);
    p.add_int_val(300);
    refused(p, errc::invalid_argument, "out of range for u8");
  }
  SECTION("a negative dimension") {
    auto p = base();
    p.mutable_tensor_shape()->mutable_dim(1)->set_size(-1);
    refused(p, errc::invalid_argument, "dimension 1 has size -1");
  }
}

TEST_CASE("a TensorProto is checked against the signature and the message size before it is allocated", "[serving][grpc]") {
  auto declared = [](tensorflow::DataType type, std::vector<int64_t> dims) {
    tensorflow::TensorProto p;
    p.set_dtype(type);
    for (int64_t d : dims) p.mutable_tensor_shape()->add_dim()->set_size(d);
    return p;
  };
  const graph::tensor_spec images{"images", graph::value_type{dtype::f32, {-1, 3}}};
  auto refusal = [](const tensorflow::TensorProto& p, const tensor_proto_limits& limits) {
    auto t = from_tensor_proto(p, "images", limits);
    REQUIRE_FALSE(t);
    return t.error_value();
  };
  // One value declared to fill 2^40 elements: refused from the declared shape.
  auto broadcast = declared(tensorflow::DT_FLOAT, {int64_t{1} << 38, 4});
  broadcast.add_float_val(1.0f);
  const auto huge = refusal(broadcast, {.spec = nullptr, .max_broadcast_bytes = 1 << 20});
  CHECK(huge.code == errc::invalid_argument);
  CHECK_THAT(huge.message, Catch::Contains("one float_val value would fill") && Catch::Contains("more than the 1048576 bytes"));
  // Within the limit, the broadcast still works.
  auto small = declared(tensorflow::DT_FLOAT, {64, 3});
  small.add_float_val(2.0f);
  CHECK(from_tensor_proto(small, "images", {.spec = &images, .max_broadcast_bytes = 1 << 20}));
  // A shape or dtype the signature does not take, whatever the content.
  auto wide = declared(tensorflow::DT_FLOAT, {int64_t{1} << 30, 4});
  wide.add_float_val(1.0f);
  const auto shape_error = refusal(wide, {.spec = &images});
  CHECK(shape_error.code == errc::shape_mismatch);
  CHECK_THAT(shape_error.message, Catch::Contains("input 'images' is f32[1073741824,4] where the signature takes f32[-1,3]"));
  auto ints = declared(tensorflow::DT_INT32, {1, 3});
  for (int v : {1, 2, 3}) ints.add_int_val(v);
  CHECK(refusal(ints, {.spec = &images}).code == errc::shape_mismatch);
  auto rank = declared(tensorflow::DT_FLOAT, {3});
  for (float v : {1.0f, 2.0f, 3.0f}) rank.add_float_val(v);
  CHECK(refusal(rank, {.spec = &images}).code == errc::shape_mismatch);
}

// -- configuration files ------------------------------------------------------------------------

TEST_CASE("a batching parameters file sets batching_options", "[serving][config]") {
  testing::scratch_dir dir{"af_grpc"};
  const auto path = write_file(dir, "batching.txt", R"(# TF Serving's format
max_batch_size { value: 16 }
batch_timeout_micros { value: 2500 }
max_enqueued_batches { value: 100 }
num_batch_threads { value: 3 }
thread_pool_name { value: "batch_threads" }
allowed_batch_sizes: 4
allowed_batch_sizes: 8
allowed_batch_sizes: 16
pad_variable_length_inputs: true
enable_large_batch_splitting { value: false }
)");
  auto options = read_batching_parameters(path);
  REQUIRE(options);
  CHECK(options->max_batch_size == 16);
  CHECK(options->batch_timeout == 2500us);
  CHECK(options->max_enqueued_batches == 100);
  CHECK(options->num_batch_threads == 3);
  CHECK(options->allowed_batch_sizes == std::vector<std::size_t>{4, 8, 16});
  CHECK(options->pad_variable_length_inputs);

  SECTION("an empty file keeps the defaults") {
    auto defaults = read_batching_parameters(write_file(dir, "empty.txt", ""));
    REQUIRE(defaults);
    CHECK(defaults->max_batch_size == batching_options{}.max_batch_size);
  }
}

TEST_CASE("batching parameter errors name the file, line and column", "[serving][config]") {
  testing::scratch_dir dir{"af_grpc"};
  auto refused = [&](const std::string& text, errc code, const std::string& words) {
    const auto path = write_file(dir, "batching.txt", text);
    auto options = read_batching_parameters(path);
    REQUIRE_FALSE(options);
    CHECK(options.error_value().code == code);
    CHECK_THAT(options.error_value().message, Catch::StartsWith(path) && Catch::Contains(words));
  };
  refused("max_batch_size { value: 8 }\nbatch_timeout_micros { value: soon }\n", errc::malformed_input, "batching.txt:2:");
  refused("max_batch_size { value: 8 }\n\nmax_batch_sise { value: 8 }\n", errc::malformed_input, "batching.txt:3:");
  refused("max_batch_size { value: 8 }\nallowed_batch_sizes: 4\nallowed_batch_sizes: 2\nallowed_batch_sizes: 8\n",
          errc::invalid_argument, ":3:1: allowed_batch_sizes must increase");
  refused("max_batch_size { value: 8 }\nallowed_batch_sizes: 2\nallowed_batch_sizes: 4\n", errc::invalid_argument,
          ":3:1: the last of allowed_batch_sizes (4) must equal max_batch_size (8)");
  refused("allowed_batch_sizes: 0\n", errc::invalid_argument, ":1:1: allowed_batch_sizes must be at least 1");
  refused("\nnum_batch_threads { value: 0 }\n", errc::invalid_argument, ":2:1: num_batch_threads must be at least 1");
  refused("enable_large_batch_splitting { value: true }\n", errc::unsupported, "enable_large_batch_splitting: true is not supported");
  auto missing = read_batching_parameters(dir.file("absent.txt"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error_value().code == errc::io_error);
}

TEST_CASE("a model config file lists models, their version policies and labels", "[serving][config]") {
  testing::scratch_dir dir{"af_grpc"};
  const auto path = write_file(dir, "models.config", R"(model_config_list {
  config {
    name: "digits"
    base_path: "/models/digits"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 1 versions: 3 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 3 }
  }
  config { name: "all" base_path: "/models/all" model_version_policy { all {} } }
  config { name: "latest2" base_path: "/models/l" model_platform: "actorflow" model_version_policy { latest { num_versions: 2 } } }
  config {
    name: "plain" base_path: "/models/p"
    logging_config { log_collector_config { type: "" filename_prefix: "/tmp/log" } sampling_config { sampling_rate: 0.1 } }
  }
}
)");
  auto models = read_model_config(path);
  REQUIRE(models);
  REQUIRE(models->size() == 4);
  // TF Serving's request logging parses and is named as not acted on.
  CHECK((*models)[3].ignored_fields == std::vector<std::string>{"logging_config"});
  CHECK((*models)[0].ignored_fields.empty());
  const auto& digits = (*models)[0];
  CHECK(digits.name == "digits");
  CHECK(digits.base_path == "/models/digits");
  CHECK(digits.policy.choice == version_policy::kind::specific);
  CHECK(digits.policy.specific_versions == std::vector<int64_t>{1, 3});
  CHECK(digits.version_labels == std::map<std::string, int64_t>{{"canary", 3}, {"stable", 1}});
  CHECK((*models)[1].policy.choice == version_policy::kind::all);
  CHECK((*models)[2].policy.choice == version_policy::kind::latest);
  CHECK((*models)[2].policy.latest_count == 2);
  CHECK((*models)[3].policy.choice == version_policy::kind::latest);
  CHECK((*models)[3].policy.latest_count == 1);
}

TEST_CASE("model config errors name the file, line and column", "[serving][config]") {
  testing::scratch_dir dir{"af_grpc"};
  auto refused = [&](const std::string& text, errc code, const std::string& words) {
    const auto path = write_file(dir, "models.config", text);
    auto models = read_model_config(path);
    REQUIRE_FALSE(models);
    CHECK(models.error_value().code == code);
    CHECK_THAT(models.error_value().message, Catch::StartsWith(path) && Catch::Contains(words));
  };
  refused("model_config_list {\n  config { name: \"a\" base_path: \"/a\" }\n  config { name: \"a\" base_path: \"/b\" }\n}\n",
          errc::invalid_argument, ":3:12: model 'a' is configured twice");
  refused("model_config_list {\n  config { base_path: \"/a\" }\n}\n", errc::invalid_argument, ":2:3: a model config without a name");
  refused("model_config_list {\n  config { name: \"a\" base_path: \"/a\"\n    model_platform: \"pytorch\" }\n}\n",
          errc::invalid_argument, ":3:5: model 'a': model_platform 'pytorch'");
  refused("model_config_list {\n  config { name: \"a\" base_path: \"/a\" model_version_policy { specific {} } }\n}\n",
          errc::invalid_argument, "lists no versions");
  refused("model_config_list {\n  config { name: \"a\"\n    base_path: /a }\n}\n", errc::malformed_input, "models.config:3:16:");
  refused("", errc::invalid_argument, "lists no models");
}

TEST_CASE("a monitoring config turns the metrics on or off and moves them", "[serving][config]") {
  testing::scratch_dir dir{"af_grpc"};
  auto read = [&](const std::string& text) { return read_monitoring_config(write_file(dir, "monitoring.config", text)); };
  CHECK(read("prometheus_config { enable: true path: \"/metrics\" }\n").value() == "/metrics");
  CHECK(read("prometheus_config { enable: true }\n").value() == "/monitoring/prometheus/metrics");
  CHECK(read("prometheus_config { enable: false path: \"/metrics\" }\n").value().empty());
  CHECK(read("").value().empty());  // as in TF Serving: no prometheus_config, no metrics
  auto relative = read("prometheus_config {\n  enable: true\n  path: \"metrics\"\n}\n");
  REQUIRE_FALSE(relative);
  CHECK_THAT(relative.error_value().message, Catch::Contains("monitoring.config:3:3") && Catch::Contains("'metrics'"));
  CHECK_FALSE(read("prometheus_config { enable: true path: \"/m?x=1\" }\n"));
  CHECK(read("prometheus_config { enabled: true }\n").error_value().code == errc::malformed_input);
}

TEST_CASE("gRPC channel arguments parse as TF Serving passes them", "[serving][config]") {
  auto parsed = parse_channel_arguments("grpc.max_connection_age_ms=1000,grpc.primary_user_agent=af=1,,grpc.keepalive_time_ms=5");
  REQUIRE(parsed);
  REQUIRE(parsed->size() == 3);
  CHECK((*parsed)[0] == std::pair<std::string, std::string>{"grpc.max_connection_age_ms", "1000"});
  CHECK((*parsed)[1] == std::pair<std::string, std::string>{"grpc.primary_user_agent", "af=1"});
  CHECK(parse_channel_arguments("").value().empty());
  CHECK_THAT(parse_channel_arguments("grpc.a=1,oops").error_value().message, Catch::Contains("'oops'"));
  CHECK_FALSE(parse_channel_arguments("=5"));
}

// -- warmup records -----------------------------------------------------------------------------

TEST_CASE("recorded warmup requests are read for their signature", "[serving][warmup]") {
  testing::scratch_dir dir{"af_grpc"};
  graph::signature sig{.name = "serving_default", .function = "f",
                       .inputs = {{"x", {dtype::f32, {-1, 4}}}, {"k", {dtype::i64, {-1}}}}, .outputs = {}};
  auto request_log = [](const std::string& signature, std::vector<std::pair<std::string, tensor>> inputs) {
    tfs::PredictionLog log;
    auto* request = log.mutable_predict_log()->mutable_request();
    request->mutable_model_spec()->set_name("m");
    request->mutable_model_spec()->set_signature_name(signature);
    for (auto& [name, value] : inputs) (*request->mutable_inputs())[name] = proto_of(value, tensor_encoding::typed);
    return log.SerializeAsString();
  };
  const tensor x = some_rows(2);
  const tensor k = tensor::from_vector<int64_t>({5, 6});
  auto write_records = [&](const std::vector<std::string>& records) {
    auto writer = tfrecord_writer::open(dir.file("warmup")).value();
    for (const auto& r : records) REQUIRE(writer.write(r));
    REQUIRE(writer.close());
    return dir.file("warmup");
  };

  SECTION("requests for this signature, in its input order; others are skipped") {
    const auto path = write_records({request_log("", {{"k", k}, {"x", x}}), request_log("other", {{"x", x}}),
                                     std::string{},  // a PredictionLog without a predict_log (classify, ...)
                                     request_log("serving_default", {{"x", some_rows(3)}, {"k", tensor::from_vector<int64_t>({1, 2, 3})}})});
    auto requests = read_warmup_requests(path, sig);
    REQUIRE(requests);
    REQUIRE(requests->size() == 2);
    REQUIRE((*requests)[0].size() == 2);
    CHECK(all_equal((*requests)[0][0], x));
    CHECK(all_equal((*requests)[0][1], k));
    CHECK((*requests)[1][0].dim(0) == 3);
  }
  SECTION("a record that does not parse is malformed_input naming the record") {
    auto requests = read_warmup_requests(write_records({request_log("", {{"x", x}, {"k", k}}), "\xff\xff\xff"}), sig);
    REQUIRE_FALSE(requests);
    CHECK(requests.error_value().code == errc::malformed_input);
    CHECK_THAT(requests.error_value().message, Catch::Contains("record 1"));
  }
  SECTION("a missing input is malformed_input; one of the wrong dtype invalid_argument") {
    auto missing = read_warmup_requests(write_records({request_log("", {{"x", x}})}), sig);
    REQUIRE_FALSE(missing);
    CHECK(missing.error_value().code == errc::malformed_input);
    CHECK_THAT(missing.error_value().message, Catch::Contains("record 0") && Catch::Contains("'k'"));
    auto wrong = read_warmup_requests(write_records({request_log("", {{"x", x}, {"k", tensor::from_vector<int32_t>({1, 2})}})}), sig);
    REQUIRE_FALSE(wrong);
    CHECK(wrong.error_value().code == errc::invalid_argument);
    CHECK_THAT(wrong.error_value().message, Catch::Contains("input 'k' is i32[2]"));
  }
}

// -- the server -----------------------------------------------------------------------------------

namespace {

struct grpc_fixture {
  testing::scratch_dir scratch{"af_grpc"};
  runtime rt;
  std::unique_ptr<model_server> models;
  std::unique_ptr<af::serving::grpc_server> server;  // qualified: grpc's C API has a ::grpc_server
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<tfs::PredictionService::Stub> predictions;
  std::unique_ptr<tfs::ModelService::Stub> management;

  explicit grpc_fixture(bool batching) {
    testing::save_version(scratch.path, 1, 11);
    testing::save_version(scratch.path, 2, 22);
    model_config config{.name = "dense", .base_path = scratch.path.string()};
    config.policy.choice = version_policy::kind::all;
    config.version_labels = {{"stable", 1}};
    server_options options;
    options.enable_batching = batching;
    options.batching.max_batch_size = 8;
    options.batching.batch_timeout = 500us;
    options.poll_interval = 0ms;
    models = model_server::start(rt, {config}, options).value();
    server = af::serving::grpc_server::start(*models, "127.0.0.1:0", {.threads = 2}).value();  // as `serve` passes
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials());
    predictions = tfs::PredictionService::NewStub(channel);
    management = tfs::ModelService::NewStub(channel);
  }
};

tfs::PredictRequest predict_request(const tensor& x, tensor_encoding encoding = tensor_encoding::content) {
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("dense");
  (*request.mutable_inputs())["x"] = proto_of(x, encoding);
  return request;
}

tensor expected_output(uint64_t seed, const tensor& x) { return testing::small_dense(seed).predict_on_batch({x}).value().front(); }

}  // namespace

TEST_CASE("Predict over gRPC answers with the model's outputs and TF Serving's model_spec", "[serving][grpc][net]") {
  grpc_fixture f{GENERATE(false, true)};
  const tensor x = some_rows(3);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  tfs::PredictResponse response;
  const auto status = f.predictions->Predict(&ctx, predict_request(x, GENERATE(tensor_encoding::content, tensor_encoding::typed)), &response);
  REQUIRE(status.ok());
  CHECK(response.model_spec().name() == "dense");
  CHECK(response.model_spec().version().value() == 2);
  CHECK(response.model_spec().signature_name() == "serving_default");
  REQUIRE(response.outputs().count("y") == 1);
  auto y = from_tensor_proto(response.outputs().at("y"), "y");
  REQUIRE(y);
  CHECK(y->shape() == shape{3, 3});
  CHECK(all_close(*y, expected_output(22, x), 1e-6, 1e-6));

  SECTION("a version by number or label") {
    for (bool by_label : {false, true}) {
      auto request = predict_request(x);
      if (by_label) request.mutable_model_spec()->set_version_label("stable");
      else request.mutable_model_spec()->mutable_version()->set_value(1);
      grpc::ClientContext c;
      tfs::PredictResponse r;
      REQUIRE(f.predictions->Predict(&c, request, &r).ok());
      CHECK(r.model_spec().version().value() == 1);
      CHECK(all_close(from_tensor_proto(r.outputs().at("y"), "y").value(), expected_output(11, x), 1e-6, 1e-6));
    }
  }
  SECTION("errors carry TF Serving's status codes") {
    auto code_of = [&](tfs::PredictRequest request) {
      grpc::ClientContext c;
      tfs::PredictResponse r;
      return f.predictions->Predict(&c, request, &r);
    };
    auto unknown = predict_request(x);
    unknown.mutable_model_spec()->set_name("nope");
    CHECK(code_of(unknown).error_code() == grpc::StatusCode::NOT_FOUND);
    auto version = predict_request(x);
    version.mutable_model_spec()->mutable_version()->set_value(7);
    CHECK(code_of(version).error_code() == grpc::StatusCode::NOT_FOUND);
    auto signature = predict_request(x);
    signature.mutable_model_spec()->set_signature_name("nope");
    const auto no_signature = code_of(signature);
    CHECK(no_signature.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(no_signature.error_message(), Catch::Contains("Serving signature key \"nope\" not found"));
    auto no_name = predict_request(x);
    no_name.mutable_model_spec()->clear_name();
    CHECK(code_of(no_name).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    auto wrong_input = predict_request(x);
    (*wrong_input.mutable_inputs())["z"] = proto_of(x);
    CHECK(code_of(wrong_input).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    auto wrong_shape = predict_request(some_rows(2).reshape({4, 2}).value());
    CHECK(code_of(wrong_shape).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    auto strings = predict_request(x);
    (*strings.mutable_inputs())["x"].set_dtype(tensorflow::DT_STRING);
    const auto refused = code_of(strings);
    CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(refused.error_message(), Catch::Contains("'x'") && Catch::Contains("string[3,4]") && Catch::Contains("f32[-1,4]"));
    auto filter = predict_request(x);
    filter.add_output_filter("logits");
    CHECK(code_of(filter).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("output_filter naming the output returns it") {
    auto request = predict_request(x);
    request.add_output_filter("y");
    grpc::ClientContext c;
    tfs::PredictResponse r;
    REQUIRE(f.predictions->Predict(&c, request, &r).ok());
    CHECK(r.outputs().size() == 1);
  }
}

TEST_CASE("concurrent gRPC predictions each get their own rows back", "[serving][grpc][net]") {
  grpc_fixture f{true};
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 15; ++i) {
        const tensor x = tensor::full({1, 4}, 0.1 * (c * 15 + i), dtype::f32).value();
        grpc::ClientContext ctx;
        tfs::PredictResponse r;
        if (!f.predictions->Predict(&ctx, predict_request(x), &r).ok() ||
            !all_close(from_tensor_proto(r.outputs().at("y"), "y").value(), expected_output(22, x), 1e-5, 1e-5))
          ++wrong;
      }
    });
  for (auto& t : clients) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("GetModelMetadata packs a SignatureDefMap as TF Serving does", "[serving][grpc][net]") {
  grpc_fixture f{false};
  tfs::GetModelMetadataRequest request;
  request.mutable_model_spec()->set_name("dense");
  request.add_metadata_field("signature_def");
  grpc::ClientContext ctx;
  tfs::GetModelMetadataResponse response;
  REQUIRE(f.predictions->GetModelMetadata(&ctx, request, &response).ok());
  CHECK(response.model_spec().name() == "dense");
  CHECK(response.model_spec().version().value() == 2);
  REQUIRE(response.metadata().count("signature_def") == 1);
  const auto& any = response.metadata().at("signature_def");
  CHECK(any.type_url() == "type.googleapis.com/tensorflow.serving.SignatureDefMap");
  tfs::SignatureDefMap defs;
  REQUIRE(any.UnpackTo(&defs));
  REQUIRE(defs.signature_def().count("serving_default") == 1);
  const auto& def = defs.signature_def().at("serving_default");
  CHECK(def.method_name() == "tensorflow/serving/predict");
  REQUIRE(def.inputs().count("x") == 1);
  const auto& x = def.inputs().at("x");
  CHECK(x.dtype() == tensorflow::DT_FLOAT);
  REQUIRE(x.tensor_shape().dim_size() == 2);
  CHECK(x.tensor_shape().dim(0).size() == -1);
  CHECK(x.tensor_shape().dim(1).size() == 4);
  CHECK(def.outputs().count("y") == 1);

  SECTION("fields other than signature_def are INVALID_ARGUMENT") {
    request.clear_metadata_field();
    request.add_metadata_field("graph");
    grpc::ClientContext c;
    tfs::GetModelMetadataResponse r;
    CHECK(f.predictions->GetModelMetadata(&c, request, &r).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_CASE("GetModelStatus lists the versions with TF Serving's states", "[serving][grpc][net]") {
  grpc_fixture f{false};
  tfs::GetModelStatusRequest request;
  request.mutable_model_spec()->set_name("dense");
  grpc::ClientContext ctx;
  tfs::GetModelStatusResponse response;
  REQUIRE(f.management->GetModelStatus(&ctx, request, &response).ok());
  REQUIRE(response.model_version_status_size() == 2);
  CHECK(response.model_version_status(0).version() == 2);
  CHECK(response.model_version_status(1).version() == 1);
  for (const auto& v : response.model_version_status()) {
    CHECK(v.state() == tfs::ModelVersionStatus::AVAILABLE);
    CHECK(static_cast<int>(v.state()) == 30);
    CHECK(v.status().error_code() == tensorflow::error::OK);
  }

  SECTION("one version, by number or label; an unknown one is NOT_FOUND") {
    request.mutable_model_spec()->set_version_label("stable");
    grpc::ClientContext c1;
    tfs::GetModelStatusResponse r1;
    REQUIRE(f.management->GetModelStatus(&c1, request, &r1).ok());
    REQUIRE(r1.model_version_status_size() == 1);
    CHECK(r1.model_version_status(0).version() == 1);
    request.mutable_model_spec()->mutable_version()->set_value(9);
    grpc::ClientContext c2;
    tfs::GetModelStatusResponse r2;
    CHECK(f.management->GetModelStatus(&c2, request, &r2).error_code() == grpc::StatusCode::NOT_FOUND);
  }
}

TEST_CASE("a busy address is refused naming it", "[serving][grpc][net]") {
  grpc_fixture f{false};
  const std::string taken = "127.0.0.1:" + std::to_string(f.server->port());
  auto second = af::serving::grpc_server::start(*f.models, taken);
  REQUIRE_FALSE(second);
  CHECK(second.error_value().code == errc::io_error);
  CHECK_THAT(second.error_value().message, Catch::Contains(taken));
}

TEST_CASE("shutting down with calls in flight neither hangs nor crashes", "[serving][grpc][net]") {
  grpc_fixture f{true};
  std::atomic<int> answered{0};
  std::array<grpc::StatusCode, 4> last_code{};
  std::vector<std::thread> clients;
  for (std::size_t c = 0; c < last_code.size(); ++c)
    clients.emplace_back([&, c] {
      for (;;) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 10s);
        tfs::PredictResponse r;
        const auto status = f.predictions->Predict(&ctx, predict_request(some_rows(2)), &r);
        if (!status.ok()) {
          last_code[c] = status.error_code();
          return;
        }
        ++answered;
      }
    });
  const bool serving = testing::eventually([&] { return answered >= 20; }, 60s);
  f.server.reset();  // waits for the calls in flight
  for (auto& t : clients) t.join();
  REQUIRE(serving);
  // Every client's calls ended because the server went away (refused, or cancelled by the
  // shutdown), none by its own deadline.
  for (auto code : last_code)
    CHECK((code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED));
}

TEST_CASE("Classify, Regress and MultiInference over gRPC answer from tf.Examples", "[serving][grpc][net][inference]") {
  testing::scratch_dir scratch{"af_grpc"};
  testing::save_inference_model(scratch.path / "3");
  runtime rt;
  server_options options;
  options.poll_interval = 0ms;
  auto models = model_server::start(rt, {{.name = "m", .base_path = scratch.path.string()}}, options).value();
  auto server = af::serving::grpc_server::start(*models, "127.0.0.1:0", {.threads = 2}).value();
  auto stub = tfs::PredictionService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));

  const std::vector<float> x{0.5f, -1, 2, 0.25f, -0.5f, 1, 0, 3};
  tfs::Input input;
  for (int r = 0; r < 2; ++r) {
    auto& feature = (*input.mutable_example_list()->add_examples()->mutable_features()->mutable_feature())["x"];
    for (int c = 0; c < 4; ++c) feature.mutable_float_list()->add_value(x[static_cast<std::size_t>(r * 4 + c)]);
  }
  auto scores = models->predict({.name = "m", .signature_name = "predict"}, {{"x", tensor::from_vector<float>(x, {2, 4})}});
  REQUIRE(scores);

  tfs::ClassificationRequest classify;
  classify.mutable_model_spec()->set_name("m");
  *classify.mutable_input() = input;
  tfs::ClassificationResponse classified;
  {
    grpc::ClientContext c;
    auto status = stub->Classify(&c, classify, &classified);
    REQUIRE(status.ok());
  }
  CHECK(classified.model_spec().version().value() == 3);
  CHECK(classified.model_spec().signature_name() == "serving_default");
  REQUIRE(classified.result().classifications_size() == 2);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c)
      CHECK(classified.result().classifications(r).classes(c).score() == scores->outputs[0].data<float>()[r * 3 + c]);

  tfs::RegressionRequest regress;
  regress.mutable_model_spec()->set_name("m");
  regress.mutable_model_spec()->set_signature_name("regress");
  *regress.mutable_input() = input;
  tfs::RegressionResponse regressed;
  {
    grpc::ClientContext c;
    REQUIRE(stub->Regress(&c, regress, &regressed).ok());
  }
  CHECK(regressed.result().regressions_size() == 2);

  tfs::MultiInferenceRequest multi;
  for (const char* name : {"classify", "regress"}) {
    auto* task = multi.add_tasks();
    task->mutable_model_spec()->set_name("m");
    task->mutable_model_spec()->set_signature_name(name);
    task->set_method_name(std::string{name} == "classify" ? "tensorflow/serving/classify" : "tensorflow/serving/regress");
  }
  *multi.mutable_input() = input;
  tfs::MultiInferenceResponse both;
  {
    grpc::ClientContext c;
    REQUIRE(stub->MultiInference(&c, multi, &both).ok());
  }
  REQUIRE(both.results_size() == 2);
  CHECK(both.results(0).classification_result().classifications(1).classes(2).score() ==
        classified.result().classifications(1).classes(2).score());
  CHECK(both.results(1).regression_result().regressions(0).value() == regressed.result().regressions(0).value());
  CHECK(both.results(1).model_spec().signature_name() == "regress");

  SECTION("errors carry TF Serving's codes") {
    auto code_of = [&](const tfs::ClassificationRequest& request) {
      grpc::ClientContext c;
      tfs::ClassificationResponse r;
      return stub->Classify(&c, request, &r);
    };
    auto wrong_method = classify;
    wrong_method.mutable_model_spec()->set_signature_name("regress");
    const auto refused = code_of(wrong_method);
    CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(refused.error_message(), Catch::Contains("Expected classification signature method_name"));
    auto empty = classify;
    empty.clear_input();
    CHECK_THAT(code_of(empty).error_message(), Catch::Contains("Input is empty"));
    auto unknown = classify;
    unknown.mutable_model_spec()->set_signature_name("nope");
    CHECK(code_of(unknown).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    auto no_model = classify;
    no_model.clear_model_spec();
    CHECK(code_of(no_model).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    auto bytes = classify;
    (*bytes.mutable_input()->mutable_example_list()->mutable_examples(0)->mutable_features()->mutable_feature())["x"]
        .mutable_bytes_list()
        ->add_value("abc");
    CHECK_THAT(code_of(bytes).error_message(), Catch::Contains("example 0: feature 'x' holds bytes"));
    tfs::MultiInferenceRequest predict_task = multi;
    predict_task.mutable_tasks(1)->set_method_name("tensorflow/serving/predict");
    grpc::ClientContext c;
    tfs::MultiInferenceResponse r;
    CHECK(stub->MultiInference(&c, predict_task, &r).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_CASE("a channel argument reaches the gRPC server and wins over its own setting", "[serving][grpc][net]") {
  testing::scratch_dir scratch{"af_grpc"};
  testing::save_version(scratch.path, 1, 11);
  runtime rt;
  server_options options;
  options.poll_interval = 0ms;
  auto models = model_server::start(rt, {{.name = "dense", .base_path = scratch.path.string()}}, options).value();
  grpc_options small;
  small.channel_arguments = {{"grpc.max_receive_message_length", "200"}};
  auto server = af::serving::grpc_server::start(*models, "127.0.0.1:0", small).value();
  auto stub = tfs::PredictionService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  auto call = [&](int64_t rows) {
    grpc::ClientContext c;
    tfs::PredictResponse r;
    return stub->Predict(&c, predict_request(some_rows(rows)), &r);
  };
  CHECK(call(1).ok());
  CHECK(call(64).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);  // 1 KiB of floats past 200 bytes
}

TEST_CASE("HandleReloadConfigRequest serves the new list of models", "[serving][grpc][net]") {
  testing::scratch_dir scratch{"af_grpc"};
  testing::save_version(scratch.path / "a", 1, 11);
  testing::save_version(scratch.path / "b", 1, 22);
  runtime rt;
  server_options options;
  options.poll_interval = 0ms;
  auto models = model_server::start(rt, {{.name = "a", .base_path = (scratch.path / "a").string()}}, options).value();
  auto server = af::serving::grpc_server::start(*models, "127.0.0.1:0", {}).value();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials());
  auto management = tfs::ModelService::NewStub(channel);
  auto reload = [&](const std::vector<std::pair<std::string, std::string>>& list) {
    tfs::ReloadConfigRequest request;
    for (const auto& [name, path] : list) {
      auto* config = request.mutable_config()->mutable_model_config_list()->add_config();
      config->set_name(name);
      config->set_base_path(path);
      config->set_model_platform("tensorflow");
    }
    grpc::ClientContext c;
    tfs::ReloadConfigResponse response;
    auto status = management->HandleReloadConfigRequest(&c, request, &response);
    if (status.ok()) CHECK(response.status().error_code() == 0);  // an error status carries no response
    return status;
  };
  auto predict = [&](const std::string& name) {
    auto request = predict_request(some_rows(1));
    request.mutable_model_spec()->set_name(name);
    grpc::ClientContext c;
    tfs::PredictResponse r;
    return tfs::PredictionService::NewStub(channel)->Predict(&c, request, &r).error_code();
  };
  REQUIRE(reload({{"a", (scratch.path / "a").string()}, {"b", (scratch.path / "b").string()}}).ok());
  CHECK(predict("a") == grpc::StatusCode::OK);
  CHECK(predict("b") == grpc::StatusCode::OK);  // loaded before the call returned
  REQUIRE(reload({{"b", (scratch.path / "b").string()}}).ok());
  CHECK(predict("a") == grpc::StatusCode::NOT_FOUND);
  CHECK(predict("b") == grpc::StatusCode::OK);
  // A list that does not fit changes nothing.
  auto refused = reload({{"c", (scratch.path / "absent").string()}});
  CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(refused.error_message(), Catch::Contains("absent"));
  CHECK(reload({}).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(predict("b") == grpc::StatusCode::OK);
}

TEST_CASE("a DT_STRING TensorProto is strings in string_val, and one value broadcasts within the bound", "[serving][grpc][string]") {
  tensorflow::TensorProto keys;
  keys.set_dtype(tensorflow::DT_STRING);
  keys.mutable_tensor_shape()->add_dim()->set_size(3);
  for (const std::string& s : {std::string("a"), std::string("\xff\x00z", 3), std::string(100, 'x')}) keys.add_string_val(s);
  auto decoded = from_tensor_proto(keys, "key");
  REQUIRE(decoded);
  CHECK(decoded->type() == dtype::string);
  CHECK(decoded->to_vector<std::string>() == std::vector<std::string>{"a", std::string("\xff\x00z", 3), std::string(100, 'x')});
  for (auto encoding : {tensor_encoding::content, tensor_encoding::typed}) {
    tensorflow::TensorProto back;
    REQUIRE(to_tensor_proto(*decoded, back, encoding));
    CHECK(back.dtype() == tensorflow::DT_STRING);
    CHECK(back.tensor_content().empty());  // strings never go as raw storage
    CHECK(back.string_val_size() == 3);
    CHECK(back.string_val(1) == std::string("\xff\x00z", 3));
  }

  tensorflow::TensorProto content = keys;
  content.clear_string_val();
  content.set_tensor_content(std::string(3 * 32, 'A'));
  auto raw = from_tensor_proto(content, "key");
  REQUIRE_FALSE(raw);
  CHECK_THAT(raw.error_value().message, Catch::Contains("string_val") && Catch::Contains("tensor_content"));

  tensorflow::TensorProto broadcast;
  broadcast.set_dtype(tensorflow::DT_STRING);
  broadcast.mutable_tensor_shape()->add_dim()->set_size(int64_t{1} << 30);
  broadcast.add_string_val(std::string(1000, 'b'));
  auto huge = from_tensor_proto(broadcast, "key", {.spec = nullptr, .max_broadcast_bytes = 1 << 20});
  REQUIRE_FALSE(huge);
  CHECK_THAT(huge.error_value().message, Catch::Contains("one string_val value would fill"));
  broadcast.mutable_tensor_shape()->mutable_dim(0)->set_size(4);
  auto four = from_tensor_proto(broadcast, "key", {.spec = nullptr, .max_broadcast_bytes = 1 << 20});
  REQUIRE(four);
  CHECK(four->to_vector<std::string>() == std::vector<std::string>(4, std::string(1000, 'b')));

  tensorflow::TensorProto too_few = keys;
  too_few.mutable_tensor_shape()->mutable_dim(0)->set_size(5);
  CHECK_FALSE(from_tensor_proto(too_few, "key"));
}

TEST_CASE("Predict over gRPC passes DT_STRING keys through, batched or not", "[serving][grpc][net][string]") {
  testing::scratch_dir scratch{"af_grpc_keys"};
  testing::save_keyed_model(scratch.path / "1");
  runtime rt;
  server_options options;
  options.enable_batching = GENERATE(false, true);
  options.batching.max_batch_size = 8;
  options.batching.batch_timeout = 500us;
  options.poll_interval = 0ms;
  auto models = model_server::start(rt, {{.name = "keyed", .base_path = scratch.path.string()}}, options).value();
  auto server = af::serving::grpc_server::start(*models, "127.0.0.1:0", {.threads = 2}).value();
  auto stub = tfs::PredictionService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));

  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("keyed");
  (*request.mutable_inputs())["x"] = proto_of(tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}), tensor_encoding::typed);
  auto& key = (*request.mutable_inputs())["key"];
  key.set_dtype(tensorflow::DT_STRING);
  key.mutable_tensor_shape()->add_dim()->set_size(2);
  key.add_string_val("first");
  key.add_string_val(std::string("\x00\xfe", 2));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  tfs::PredictResponse response;
  const auto status = stub->Predict(&ctx, request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  for (const char* name : {"key", "key_bytes"}) {
    const auto& out = response.outputs().at(name);
    CHECK(out.dtype() == tensorflow::DT_STRING);
    REQUIRE(out.string_val_size() == 2);
    CHECK(out.string_val(0) == "first");
    CHECK(out.string_val(1) == std::string("\x00\xfe", 2));
  }

  // Numbers where the signature takes strings: INVALID_ARGUMENT naming the input.
  (*request.mutable_inputs())["key"] = proto_of(tensor::from_vector<float>({1, 2}), tensor_encoding::typed);
  grpc::ClientContext again;
  const auto refused = stub->Predict(&again, request, &response);
  CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(refused.error_message(), Catch::Contains("key"));
}
