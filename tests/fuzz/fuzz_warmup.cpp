// Fuzzes read_warmup_requests: a TFRecord file of PredictionLog records, as a SavedModel's
// assets.extra/tf_serving_warmup_requests holds them, read against a two-input signature.
//
// Input: the file's bytes.
// Invariants: no crash, hang or allocation past the limits; a refusal is malformed_input,
// invalid_argument or io_error with a message naming the file; every request read has the
// signature's inputs in its order, each of the spec's dtype and of a shape that fits it.

#include <string>

#include "apps/serving/warmup_records.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace af;
  static af::fuzz::memory_file file;
  static const graph::signature signature{.name = "serving_default",
                                          .function = "f",
                                          .inputs = {{"x", {dtype::f32, {-1, 2}}}, {"k", {dtype::i64, {-1}}}},
                                          .outputs = {{"y", {dtype::f32, {-1}}}},
                                          .captures = {}};
  file.assign(af::fuzz::as_chars(data, size));
  auto requests = serving::read_warmup_requests(file.path(), signature);
  if (!requests) {
    const auto& e = requests.error_value();
    AF_FUZZ_CHECK(e.code == errc::malformed_input || e.code == errc::invalid_argument || e.code == errc::io_error,
                  "warmup records were refused with " + e.to_string());
    AF_FUZZ_CHECK(e.message.find(file.path()) != std::string::npos, "a refusal does not name the file: " + e.message);
    return 0;
  }
  for (const auto& inputs : *requests) {
    AF_FUZZ_CHECK(inputs.size() == signature.inputs.size(), "a request without every input of the signature");
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto& spec = signature.inputs[i].type;
      AF_FUZZ_CHECK(inputs[i].type() == spec.type && static_cast<std::size_t>(inputs[i].ndim()) == spec.dims.size(),
                    "input " + std::to_string(i) + " does not fit its spec");
      for (std::size_t d = 0; d < spec.dims.size(); ++d)
        AF_FUZZ_CHECK(spec.dims[d] < 0 || spec.dims[d] == inputs[i].dim(static_cast<int>(d)), "a fixed dimension differs");
    }
  }
  return 0;
}
