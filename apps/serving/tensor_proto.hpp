#pragma once

// af::tensor <-> tensorflow::TensorProto, the tensor of TF Serving's gRPC API and of its recorded
// warmup requests.
//
// A TensorProto carries its elements one of two ways:
//   tensor_content   the elements packed row-major, little-endian (what tf.make_tensor_proto
//                    writes for a numpy array); booleans one byte each
//   a typed field    float_val (DT_FLOAT), double_val (DT_DOUBLE), int_val (DT_INT32, DT_INT8,
//                    DT_UINT8), int64_val (DT_INT64), bool_val (DT_BOOL), half_val (DT_HALF and
//                    DT_BFLOAT16, the 16 bits in an int32). One value there fills the whole shape
//                    (TensorFlow's broadcast of a scalar); otherwise it holds every element.
// Reading accepts both; writing picks one (tensor_content is the fast one: one copy).
//
// The generated protobuf types stay out of this header (it is included by code that must not pay
// for protobuf's headers): the message is only forward-declared.

#include <string_view>

#include "ops/dtype.hpp"
#include "ops/error.hpp"
#include "ops/graph/module.hpp"
#include "ops/shape.hpp"
#include "ops/tensor.hpp"

namespace tensorflow {
class TensorProto;
class TensorShapeProto;
}  // namespace tensorflow

namespace af::serving {

/// TensorFlow's DataType number for `t` (DT_FLOAT = 1, DT_HALF = 19, ...).
int to_tf_dtype(dtype t) noexcept;
/// The dtype of a DataType number; dtype_mismatch naming `what` (an input's name) for a type
/// actorflow lacks ("DT_STRING"), unknown_dtype for a number TensorFlow does not define.
expected<dtype> from_tf_dtype(int code, std::string_view what);
/// "DT_FLOAT", "DT_STRING", ... ("DT_<number>" for one not defined).
std::string tf_dtype_name(int code);

/// `dims` into `out` (-1 stays -1: an open dimension, as signatures print it).
void to_shape_proto(const shape& dims, tensorflow::TensorShapeProto& out);

enum class tensor_encoding {
  content,  ///< tensor_content: packed bytes
  typed,    ///< the dtype's repeated field (float_val, int_val, ...)
};

/// `t` (any layout, on the CPU) as `out`: dtype, shape and the elements. out_of_memory when a
/// contiguous copy of a strided view cannot be made.
expected<void> to_tensor_proto(const tensor& t, tensorflow::TensorProto& out,
                               tensor_encoding encoding = tensor_encoding::content);

/// What a decoded TensorProto may be, checked on its declared dtype and shape before anything of
/// its size is allocated: a request cannot make the server allocate more than it sent.
struct tensor_proto_limits {
  /// When set, the dtype and shape must fit it (same dtype and rank; its fixed dims equal).
  const graph::tensor_spec* spec = nullptr;
  /// The most bytes one value in a typed field may broadcast to (the largest message a client
  /// could have sent the elements in): one float_val with a declared shape of billions of
  /// elements is refused, not allocated.
  std::size_t max_broadcast_bytes = std::size_t{1} << 30;
};

/// The tensor `proto` holds, in its own fresh storage. Errors name `what` (the input's name):
/// dtype_mismatch for DT_STRING and other types actorflow lacks; shape_mismatch for a dtype or
/// shape that does not fit `limits.spec`; invalid_argument for a negative or unknown-rank shape, tensor_content whose
/// size is not elements x element size, a typed field with neither one value nor one per element
/// (or one broadcast past `limits.max_broadcast_bytes`), or an integer out of its dtype's range.
expected<tensor> from_tensor_proto(const tensorflow::TensorProto& proto, std::string_view what, const tensor_proto_limits& limits = {});

}  // namespace af::serving
