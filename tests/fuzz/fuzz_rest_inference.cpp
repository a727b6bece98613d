// Fuzzes the Classify/Regress decoders: a REST :classify/:regress body (decode_inference) or a
// gRPC Input message (examples_from_input), then the examples into a signature's inputs.
//
// Input: one byte choosing the decoder and the signature, then the body or the serialized Input.
//   bit 0     0: a REST JSON body; 1: a tensorflow.serving.Input
//   bits 1-2  the signature: x f32[-1,4]; x f32[-1,-1] and k i64[-1]; k i8[-1,2]; x f16[-1,2,-1]
// Invariants: no crash, hang or allocation past what the message carries; every decoded input has
// one row per example and its signature's dtype; a refusal is invalid_argument with a message.

#include <string>
#include <vector>

#include "apps/serving/example_proto.hpp"
#include "apps/serving/rest_inference.hpp"
#include "fuzz_support.hpp"
#include "tensorflow_serving/apis/input.pb.h"

namespace {

using namespace af;

graph::signature signature_with(std::vector<graph::tensor_spec> inputs) {
  graph::signature s{"s", "f", std::move(inputs), {{"scores", {dtype::f32, {-1, 2}}}}, {}};
  s.method_name = std::string{graph::classify_method};
  return s;
}

void check_refusal(const error& e, const char* what) {
  AF_FUZZ_CHECK(e.code == errc::invalid_argument, std::string{what} + " refused with " + e.to_string());
  AF_FUZZ_CHECK(!e.message.empty(), std::string{what} + " refused without a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const std::vector<graph::signature> signatures{
      signature_with({{"x", {dtype::f32, {-1, 4}}}}),
      signature_with({{"x", {dtype::f32, {-1, -1}}}, {"k", {dtype::i64, {-1}}}}),
      signature_with({{"k", {dtype::i8, {-1, 2}}}}),
      signature_with({{"x", {dtype::f16, {-1, 2, -1}}}})};
  if (size == 0) return 0;
  const auto& signature = signatures[(data[0] >> 1) & 3];
  serving::example_batch batch;
  if (data[0] & 1) {
    tensorflow::serving::Input input;
    if (!input.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    auto decoded = serving::examples_from_input(input);
    if (!decoded) return check_refusal(decoded.error_value(), "examples_from_input"), 0;
    batch = std::move(*decoded);
  } else {
    auto decoded = serving::decode_inference({reinterpret_cast<const char*>(data + 1), size - 1});
    if (!decoded) return check_refusal(decoded.error_value(), "decode_inference"), 0;
    batch = std::move(decoded->batch);
  }
  AF_FUZZ_CHECK(!batch.examples.empty(), "a decoded request holds no examples");
  auto inputs = serving::inputs_from_examples(batch, signature);
  if (!inputs) return check_refusal(inputs.error_value(), "inputs_from_examples"), 0;
  AF_FUZZ_CHECK(inputs->size() == signature.inputs.size(), "not one tensor per input");
  for (std::size_t i = 0; i < inputs->size(); ++i) {
    const tensor& t = (*inputs)[i].value;
    AF_FUZZ_CHECK(t.type() == signature.inputs[i].type.type, "an input of another dtype");
    AF_FUZZ_CHECK(static_cast<std::size_t>(t.ndim()) == signature.inputs[i].type.dims.size(), "an input of another rank");
    AF_FUZZ_CHECK(t.shape()[0] == static_cast<int64_t>(batch.examples.size()), "not one row per example");
  }
  return 0;
}
