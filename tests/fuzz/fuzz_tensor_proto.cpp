// Fuzzes from_tensor_proto, the decoder of every gRPC Predict input and warmup record.
//
// Input: one byte choosing the limits, then a serialized tensorflow.TensorProto.
//   bits 0-2  the signature spec the tensor is checked against: none, f32[-1,3], u8[-1], i64[2,-1],
//             bool[-1,2], f16[-1], i8[-1,1], i32[-1]
//   bit 3     a small broadcast limit (4 KiB; else 1 MiB)
//   bit 4     the spec is string[-1] instead (DT_STRING in string_val)
// Invariants: no crash, hang or allocation past the limits; a decoded tensor has the declared
// dtype and shape, fits the spec, and is no larger than the message unless one value was
// broadcast within the limit; it survives to_tensor_proto and back (both encodings) unchanged;
// a refusal is invalid_argument, shape_mismatch, dtype_mismatch or unknown_dtype with a message.

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "apps/serving/tensor_proto.hpp"
#include "fuzz_support.hpp"
#include "tensorflow/core/framework/tensor.pb.h"

namespace {

using namespace af;

bool same_bytes(const tensor& a, const tensor& b) {
  if (is_string(a.type()) || is_string(b.type())) return all_equal(a, b);  // objects: compared as strings
  return a.type() == b.type() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const std::vector<std::optional<graph::tensor_spec>> specs{
      std::nullopt,
      graph::tensor_spec{"x", {dtype::f32, {-1, 3}}},
      graph::tensor_spec{"x", {dtype::u8, {-1}}},
      graph::tensor_spec{"x", {dtype::i64, {2, -1}}},
      graph::tensor_spec{"x", {dtype::boolean, {-1, 2}}},
      graph::tensor_spec{"x", {dtype::f16, {-1}}},
      graph::tensor_spec{"x", {dtype::i8, {-1, 1}}},
      graph::tensor_spec{"x", {dtype::i32, {-1}}}};
  if (size == 0) return 0;
  static const std::optional<graph::tensor_spec> strings = graph::tensor_spec{"x", {dtype::string, {-1}}};
  const auto& spec = data[0] & 16 ? strings : specs[data[0] & 7];
  serving::tensor_proto_limits limits;
  limits.spec = spec ? &*spec : nullptr;
  limits.max_broadcast_bytes = data[0] & 8 ? 4096 : std::size_t{1} << 20;
  tensorflow::TensorProto proto;
  if (!proto.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;

  auto t = serving::from_tensor_proto(proto, "x", limits);
  if (!t) {
    const auto& e = t.error_value();
    AF_FUZZ_CHECK(e.code == errc::invalid_argument || e.code == errc::shape_mismatch || e.code == errc::dtype_mismatch ||
                      e.code == errc::unknown_dtype,
                  "from_tensor_proto refused with " + e.to_string());
    AF_FUZZ_CHECK(!e.message.empty(), "from_tensor_proto refused without a message");
    return 0;
  }
  AF_FUZZ_CHECK(static_cast<int>(t->ndim()) == proto.tensor_shape().dim_size(), "the decoded rank differs from the declared one");
  for (int d = 0; d < proto.tensor_shape().dim_size(); ++d)
    AF_FUZZ_CHECK(t->dim(d) == proto.tensor_shape().dim(d).size(), "dimension " + std::to_string(d) + " differs from the declared one");
  if (spec) {
    AF_FUZZ_CHECK(t->type() == spec->type.type, "a tensor of another dtype than the spec's was accepted");
    for (std::size_t d = 0; d < spec->type.dims.size(); ++d)
      AF_FUZZ_CHECK(spec->type.dims[d] < 0 || spec->type.dims[d] == t->dim(static_cast<int>(d)), "a dimension the spec fixes differs");
  }
  if (is_string(t->type())) {
    // Each string_val costs at least 2 bytes of message; one value broadcast counts its copies.
    std::size_t held = 0;
    for (const auto& s : t->to_vector<std::string>()) held += sizeof(std::string) + s.size();
    AF_FUZZ_CHECK(static_cast<std::size_t>(t->numel()) <= size || held <= limits.max_broadcast_bytes,
                  "a " + std::to_string(size) + "-byte message decoded to " + std::to_string(t->numel()) + " strings");
  } else {
    AF_FUZZ_CHECK(t->nbytes() <= size || t->nbytes() <= limits.max_broadcast_bytes,
                  "a " + std::to_string(size) + "-byte message decoded to " + std::to_string(t->nbytes()) + " bytes");
  }
  for (auto encoding : {serving::tensor_encoding::content, serving::tensor_encoding::typed}) {
    tensorflow::TensorProto again;
    AF_FUZZ_CHECK(serving::to_tensor_proto(*t, again, encoding), "to_tensor_proto failed on a decoded tensor");
    auto back = serving::from_tensor_proto(again, "x", {.spec = nullptr, .max_broadcast_bytes = std::size_t{1} << 30});
    AF_FUZZ_CHECK(back && same_bytes(*back, *t), "a decoded tensor does not survive to_tensor_proto and back");
  }
  return 0;
}
