#include "apps/serving/tensor_proto.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "tensorflow/core/framework/tensor.pb.h"

namespace af::serving {

static_assert(std::endian::native == std::endian::little, "tensor_content is little-endian; so is our storage");

namespace {

std::string quoted(std::string_view what) { return "input '" + std::string{what} + "'"; }

// The elements of a typed field converted to T: one value fills all n, otherwise exactly n.
template <class T, class Field, class Convert>
expected<tensor> from_typed(const Field& values, const shape& dims, dtype type, std::string_view what,
                            const char* field_name, std::size_t max_broadcast_bytes, Convert convert) {
  const int64_t n = numel(dims);
  const auto given = static_cast<int64_t>(values.size());
  if (!(given == n || (given == 1 && n > 1)))
    return make_error(errc::invalid_argument, quoted(what) + ": " + std::string{field_name} + " holds " + std::to_string(given) +
                                                  " values for " + std::to_string(n) + " elements of shape " + to_string(dims) +
                                                  " (needs one per element, or one for all)");
  if (given == 1 && static_cast<uint64_t>(n) > max_broadcast_bytes / sizeof(T))
    return make_error(errc::invalid_argument, quoted(what) + ": one " + std::string{field_name} + " value would fill " +
                                                  std::to_string(n) + " elements of shape " + to_string(dims) + ", more than the " +
                                                  std::to_string(max_broadcast_bytes) + " bytes a request may carry");
  AF_TRY_ASSIGN(tensor out, tensor::empty(dims, type));
  T* dst = static_cast<T*>(out.raw_data());
  for (int64_t i = 0; i < n; ++i) {
    auto v = convert(values.Get(static_cast<int>(given == 1 ? 0 : i)));
    if (!v) return make_error(errc::invalid_argument, quoted(what) + ": " + std::string{field_name} + "[" +
                                                          std::to_string(given == 1 ? 0 : i) + "] = " +
                                                          std::to_string(values.Get(static_cast<int>(given == 1 ? 0 : i))) +
                                                          " is out of range for " + std::string{to_string(type)});
    dst[i] = *v;
  }
  return out;
}

// string_val as a string tensor: one value fills all n (the copies bounded like any broadcast,
// each counted with its std::string), otherwise exactly n.
template <class Field>
expected<tensor> strings_from(const Field& values, const shape& dims, std::string_view what, std::size_t max_broadcast_bytes) {
  const int64_t n = numel(dims);
  const auto given = static_cast<int64_t>(values.size());
  if (!(given == n || (given == 1 && n > 1)))
    return make_error(errc::invalid_argument, quoted(what) + ": string_val holds " + std::to_string(given) + " values for " +
                                                  std::to_string(n) + " elements of shape " + to_string(dims) +
                                                  " (needs one per element, or one for all)");
  if (given == 1 && static_cast<uint64_t>(n) > max_broadcast_bytes / (sizeof(std::string) + values.Get(0).size()))
    return make_error(errc::invalid_argument, quoted(what) + ": one string_val value would fill " + std::to_string(n) +
                                                  " elements of shape " + to_string(dims) + ", more than the " +
                                                  std::to_string(max_broadcast_bytes) + " bytes a request may carry");
  AF_TRY_ASSIGN(tensor out, tensor::empty(dims, dtype::string));
  auto* dst = out.data<std::string>();
  for (int64_t i = 0; i < n; ++i) dst[i] = values.Get(static_cast<int>(given == 1 ? 0 : i));
  return out;
}

// An integer converted to T when it fits.
template <class T, class V>
std::optional<T> narrow(V v) {
  if (v < static_cast<V>(std::numeric_limits<T>::min()) || v > static_cast<V>(std::numeric_limits<T>::max()))
    return std::nullopt;
  return static_cast<T>(v);
}

template <class T>
std::optional<T> same(T v) {
  return v;
}

// 16 bits carried in an int32 (half_val).
template <class T>
std::optional<T> from_bits(int32_t v) {
  if (v < 0 || v > 0xffff) return std::nullopt;
  T out;
  out.bits = static_cast<uint16_t>(v);
  return out;
}

}  // namespace

int to_tf_dtype(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return tensorflow::DT_FLOAT;
    case dtype::f64: return tensorflow::DT_DOUBLE;
    case dtype::f16: return tensorflow::DT_HALF;
    case dtype::bf16: return tensorflow::DT_BFLOAT16;
    case dtype::i8: return tensorflow::DT_INT8;
    case dtype::u8: return tensorflow::DT_UINT8;
    case dtype::i32: return tensorflow::DT_INT32;
    case dtype::i64: return tensorflow::DT_INT64;
    case dtype::boolean: return tensorflow::DT_BOOL;
    case dtype::string: return tensorflow::DT_STRING;
  }
  return tensorflow::DT_INVALID;
}

std::string tf_dtype_name(int code) {
  if (tensorflow::DataType_IsValid(code)) return tensorflow::DataType_Name(static_cast<tensorflow::DataType>(code));
  return "DT_" + std::to_string(code);
}

expected<dtype> from_tf_dtype(int code, std::string_view what) {
  switch (code) {
    case tensorflow::DT_FLOAT: return dtype::f32;
    case tensorflow::DT_DOUBLE: return dtype::f64;
    case tensorflow::DT_HALF: return dtype::f16;
    case tensorflow::DT_BFLOAT16: return dtype::bf16;
    case tensorflow::DT_INT8: return dtype::i8;
    case tensorflow::DT_UINT8: return dtype::u8;
    case tensorflow::DT_INT32: return dtype::i32;
    case tensorflow::DT_INT64: return dtype::i64;
    case tensorflow::DT_BOOL: return dtype::boolean;
    case tensorflow::DT_STRING: return dtype::string;
    default: break;
  }
  if (!tensorflow::DataType_IsValid(code) || code == tensorflow::DT_INVALID)
    return make_error(errc::unknown_dtype, quoted(what) + ": dtype " + tf_dtype_name(code) + " is not a TensorFlow DataType");
  return make_error(errc::dtype_mismatch, quoted(what) + ": " + tf_dtype_name(code) +
                                              " tensors are not supported (actorflow takes DT_FLOAT, DT_DOUBLE, DT_HALF, "
                                              "DT_BFLOAT16, DT_INT8, DT_UINT8, DT_INT32, DT_INT64 and DT_BOOL)");
}

void to_shape_proto(const shape& dims, tensorflow::TensorShapeProto& out) {
  out.Clear();
  for (int64_t d : dims) out.add_dim()->set_size(d);
}

expected<void> to_tensor_proto(const tensor& t, tensorflow::TensorProto& out, tensor_encoding encoding) {
  out.Clear();
  out.set_dtype(static_cast<tensorflow::DataType>(to_tf_dtype(t.type())));
  to_shape_proto(t.shape(), *out.mutable_tensor_shape());
  if (!t.dev().is_cpu()) return make_error(errc::unsupported, "TensorProto from a tensor not on the CPU");
  AF_TRY_ASSIGN(tensor dense, t.contiguous());
  const auto n = static_cast<std::size_t>(dense.numel());
  // Strings always go as string_val, as TF sends them: their storage holds objects, not bytes.
  if (encoding == tensor_encoding::content && !is_string(dense.type())) {
    out.mutable_tensor_content()->assign(static_cast<const char*>(dense.raw_data()), dense.nbytes());
    return {};
  }
  const void* p = dense.raw_data();
  auto add_all = [&](auto* field, const auto* src) {
    field->Reserve(static_cast<int>(n));
    for (std::size_t i = 0; i < n; ++i) field->AddAlreadyReserved(src[i]);
  };
  switch (t.type()) {
    case dtype::f32: add_all(out.mutable_float_val(), static_cast<const float*>(p)); break;
    case dtype::f64: add_all(out.mutable_double_val(), static_cast<const double*>(p)); break;
    case dtype::i32: add_all(out.mutable_int_val(), static_cast<const int32_t*>(p)); break;
    case dtype::i8: add_all(out.mutable_int_val(), static_cast<const int8_t*>(p)); break;
    case dtype::u8: add_all(out.mutable_int_val(), static_cast<const uint8_t*>(p)); break;
    case dtype::i64: add_all(out.mutable_int64_val(), static_cast<const int64_t*>(p)); break;
    case dtype::boolean: {
      const auto* b = static_cast<const uint8_t*>(p);
      out.mutable_bool_val()->Reserve(static_cast<int>(n));
      for (std::size_t i = 0; i < n; ++i) out.mutable_bool_val()->AddAlreadyReserved(b[i] != 0);
      break;
    }
    case dtype::f16:
    case dtype::bf16: add_all(out.mutable_half_val(), static_cast<const uint16_t*>(p)); break;
    case dtype::string: {
      const auto* s = static_cast<const std::string*>(p);
      out.mutable_string_val()->Reserve(static_cast<int>(n));
      for (std::size_t i = 0; i < n; ++i) out.add_string_val(s[i]);
      break;
    }
  }
  return {};
}

expected<tensor> from_tensor_proto(const tensorflow::TensorProto& proto, std::string_view what, const tensor_proto_limits& limits) {
  AF_TRY_ASSIGN(const dtype type, from_tf_dtype(proto.dtype(), what));
  if (proto.tensor_shape().unknown_rank())
    return make_error(errc::invalid_argument, quoted(what) + ": a tensor of unknown rank (tensor_shape.unknown_rank)");
  shape dims;
  int64_t n = 1;
  for (const auto& d : proto.tensor_shape().dim()) {
    if (d.size() < 0)
      return make_error(errc::invalid_argument, quoted(what) + ": dimension " + std::to_string(dims.size()) + " has size " +
                                                    std::to_string(d.size()));
    if (d.size() != 0 && n > std::numeric_limits<int64_t>::max() / d.size() / 16)
      return make_error(errc::invalid_argument, quoted(what) + ": a shape too large to hold");
    n *= d.size();
    dims.push_back(d.size());
  }
  if (const auto* spec = limits.spec) {
    bool fits = type == spec->type.type && dims.size() == spec->type.dims.size();
    for (std::size_t d = 0; fits && d < dims.size(); ++d) fits = spec->type.dims[d] < 0 || spec->type.dims[d] == dims[d];
    if (!fits)
      return make_error(errc::shape_mismatch, quoted(what) + " is " + std::string{to_string(type)} + to_string(dims) +
                                                    " where the signature takes " + to_string(spec->type));
  }

  if (is_string(type) && !proto.tensor_content().empty())
    return make_error(errc::invalid_argument, quoted(what) + ": DT_STRING values go in string_val, not tensor_content");
  if (!proto.tensor_content().empty() || n == 0) {
    const std::size_t want = static_cast<std::size_t>(n) * size_of(type);
    if (proto.tensor_content().size() != want)
      return make_error(errc::invalid_argument, quoted(what) + ": tensor_content holds " +
                                                    std::to_string(proto.tensor_content().size()) + " bytes, but " +
                                                    std::string{to_string(type)} + to_string(dims) + " needs " +
                                                    std::to_string(want));
    AF_TRY_ASSIGN(tensor out, tensor::empty(dims, type));
    if (want) std::memcpy(out.raw_data(), proto.tensor_content().data(), want);
    if (type == dtype::boolean) {  // any non-zero byte is true; we keep 0 or 1
      auto* b = static_cast<uint8_t*>(out.raw_data());
      for (std::size_t i = 0; i < want; ++i) b[i] = b[i] != 0;
    }
    return out;
  }

  switch (type) {
    case dtype::f32: return from_typed<float>(proto.float_val(), dims, type, what, "float_val", limits.max_broadcast_bytes, same<float>);
    case dtype::f64: return from_typed<double>(proto.double_val(), dims, type, what, "double_val", limits.max_broadcast_bytes, same<double>);
    case dtype::i32: return from_typed<int32_t>(proto.int_val(), dims, type, what, "int_val", limits.max_broadcast_bytes, same<int32_t>);
    case dtype::i8: return from_typed<int8_t>(proto.int_val(), dims, type, what, "int_val", limits.max_broadcast_bytes, narrow<int8_t, int32_t>);
    case dtype::u8: return from_typed<uint8_t>(proto.int_val(), dims, type, what, "int_val", limits.max_broadcast_bytes, narrow<uint8_t, int32_t>);
    case dtype::i64: return from_typed<int64_t>(proto.int64_val(), dims, type, what, "int64_val", limits.max_broadcast_bytes, same<int64_t>);
    case dtype::boolean:
      return from_typed<uint8_t>(proto.bool_val(), dims, type, what, "bool_val", limits.max_broadcast_bytes,
                                 [](bool v) { return std::optional<uint8_t>{static_cast<uint8_t>(v ? 1 : 0)}; });
    case dtype::f16: return from_typed<half>(proto.half_val(), dims, type, what, "half_val", limits.max_broadcast_bytes, from_bits<half>);
    case dtype::bf16: return from_typed<bfloat16>(proto.half_val(), dims, type, what, "half_val", limits.max_broadcast_bytes, from_bits<bfloat16>);
    case dtype::string: return strings_from(proto.string_val(), dims, what, limits.max_broadcast_bytes);
  }
  return make_error(errc::unknown_dtype, quoted(what) + ": unknown dtype");
}

}  // namespace af::serving
