#include "serialization/tensor_codec.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>

#include "tensor.capnp.h"

namespace af {

std::string encode_tensor_header(const tensor& t) {
  return encode_tensor_header(tensor_header{t.type(), t.shape(), t.nbytes(), t.dev()});
}

std::string encode_tensor_header(const tensor_header& in) {
  capnp::MallocMessageBuilder message;
  auto header = message.initRoot<schema::TensorHeader>();
  header.setDtype(static_cast<uint8_t>(in.type));
  auto dims = header.initShape(static_cast<unsigned>(in.dims.size()));
  for (std::size_t i = 0; i < in.dims.size(); ++i) dims.set(static_cast<unsigned>(i), in.dims[i]);
  header.setPayloadBytes(in.payload_bytes);
  header.setDeviceType(static_cast<uint8_t>(in.origin.type));
  header.setDeviceIndex(in.origin.index);
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

expected<tensor_header> decode_tensor_header(const void* bytes, std::size_t size) {
  if (size % sizeof(capnp::word) != 0 || size == 0)
    return make_error(errc::malformed_input,
                      "tensor header: " + std::to_string(size) + " bytes is not a whole number of words");
  // Copy into word-aligned memory: the bytes may sit at any address inside a network buffer.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes, size);
  try {
    capnp::FlatArrayMessageReader reader(words);
    auto header = reader.getRoot<schema::TensorHeader>();
    auto type = dtype_from_code(header.getDtype());
    if (!type) return make_error(errc::unknown_dtype, "tensor header: " + type.error_value().message);
    tensor_header out;
    out.type = *type;
    auto shape = header.getShape();
    if (shape.size() > max_tensor_rank)
      return make_error(errc::malformed_input, "tensor header: rank " + std::to_string(shape.size()) +
                                                   " exceeds " + std::to_string(max_tensor_rank));
    uint64_t count = 1;
    for (auto d : shape) {
      if (d < 0)
        return make_error(errc::malformed_input, "tensor header: negative dimension " + std::to_string(d));
      out.dims.push_back(d);
      if (d != 0 && count > (uint64_t{1} << 56) / static_cast<uint64_t>(d))
        return make_error(errc::malformed_input, "tensor header: shape " + to_string(out.dims) + " is too large");
      count *= static_cast<uint64_t>(d);
    }
    out.payload_bytes = header.getPayloadBytes();
    if (out.payload_bytes != count * size_of(out.type))
      return make_error(errc::malformed_input,
                        "tensor header: payload of " + std::to_string(out.payload_bytes) + " bytes for " +
                            std::string(to_string(out.type)) + " " + to_string(out.dims) + " (expected " +
                            std::to_string(count * size_of(out.type)) + ")");
    out.origin = header.getDeviceType() == 1 ? device::cuda(header.getDeviceIndex()) : device::cpu();
    return out;
  } catch (const kj::Exception& e) {
    return make_error(errc::malformed_input, std::string("tensor header: ") + e.getDescription().cStr());
  }
}

}  // namespace af
