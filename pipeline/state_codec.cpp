// Bytes of saved iterator state.

#include "pipeline/state_codec.hpp"

#include <cstring>


namespace af::data {

void state_writer::u64(uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out_.append(b, 8);
}

void state_writer::bytes(std::string_view v) {
  u64(v.size());
  out_.append(v);
}

expected<void> state_writer::put(const element& e) {
  u64(e.fields.size());
  for (const auto& f : e.fields) {
    if (is_string(f.value.type()))
      return make_error(errc::unsupported, "iterator state: field '" + f.name + "' holds strings, which a state cannot save yet");
    AF_TRY_ASSIGN(tensor dense, f.value.contiguous());
    bytes(f.name);
    bytes(encode_tensor_header(dense));
    u64(dense.nbytes());
    out_.append((payload_alignment - out_.size() % payload_alignment) % payload_alignment, '\0');
    out_.append(static_cast<const char*>(dense.raw_data()), dense.nbytes());
  }
  bytes(e.origin.file ? std::string_view{*e.origin.file} : std::string_view{});
  i64(e.origin.record);
  i64(e.origin.offset);
  return {};
}

error state_reader::bad(const std::string& why) const {
  return make_error(errc::malformed_input, "iterator state of " + what_ + ": " + why);
}

expected<uint64_t> state_reader::u64(const char* field) {
  if (in_.size() < 8)
    return bad(std::string{"ends inside '"} + field + "' (needs 8 bytes, has " + std::to_string(in_.size()) + ")");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in_[i])) << (8 * i);
  in_.remove_prefix(8);
  return v;
}

expected<int64_t> state_reader::i64(const char* field) {
  AF_TRY_ASSIGN(uint64_t v, u64(field));
  return static_cast<int64_t>(v);
}

expected<std::string_view> state_reader::view(const char* field) {
  AF_TRY_ASSIGN(uint64_t n, u64(field));
  if (n > in_.size())
    return bad(std::string{"'"} + field + "' claims " + std::to_string(n) + " bytes, " + std::to_string(in_.size()) + " are left");
  const std::string_view v = in_.substr(0, static_cast<std::size_t>(n));
  in_.remove_prefix(static_cast<std::size_t>(n));
  return v;
}

expected<std::string> state_reader::bytes(const char* field) {
  AF_TRY_ASSIGN(std::string_view v, view(field));
  return std::string{v};
}

// Payloads start aligned relative to the start of the whole state (see the header).
expected<void> state_reader::skip_padding(const char* field) {
  const auto at = static_cast<std::size_t>(in_.data() - base_);
  const std::size_t pad = (payload_alignment - at % payload_alignment) % payload_alignment;
  if (pad > in_.size()) return bad(std::string{"ends inside the padding of '"} + field + "'");
  in_.remove_prefix(pad);
  return {};
}

expected<tensor> state_reader::tensor_of(const tensor_header& header, std::string_view payload) const {
  const auto byte_offset = static_cast<std::size_t>(payload.data() - base_);
  if (whole_.defined() && byte_offset % size_of(header.type) == 0)
    return tensor{header.type, header.dims, contiguous_strides(header.dims),
                  static_cast<int64_t>(byte_offset / size_of(header.type)), whole_.buffer()};
  AF_TRY_ASSIGN(tensor t, tensor::empty(header.dims, header.type));
  if (!payload.empty()) std::memcpy(t.raw_data(), payload.data(), payload.size());
  return t;
}

expected<element> state_reader::get_element(const char* field) {
  element e;
  AF_TRY_ASSIGN(uint64_t count, u64(field));
  if (count > in_.size()) return bad(std::string{"'"} + field + "' claims " + std::to_string(count) + " fields");
  for (uint64_t i = 0; i < count; ++i) {
    AF_TRY_ASSIGN(std::string name, bytes(field));
    AF_TRY_ASSIGN(std::string_view head, view(field));
    AF_TRY_ASSIGN(uint64_t payload_bytes, u64(field));
    AF_TRY(skip_padding(field));
    if (payload_bytes > in_.size())
      return bad(std::string{"'"} + field + "' claims " + std::to_string(payload_bytes) + " payload bytes, " +
                 std::to_string(in_.size()) + " are left");
    const std::string_view payload = in_.substr(0, static_cast<std::size_t>(payload_bytes));
    in_.remove_prefix(payload.size());
    auto header = decode_tensor_header(head.data(), head.size());
    if (!header) return bad(std::string{"field '"} + name + "' of '" + field + "': " + header.error_value().message);
    if (header->payload_bytes != payload.size())
      return bad(std::string{"field '"} + name + "' of '" + field + "' has " + std::to_string(payload.size()) +
                 " payload bytes, its header says " + std::to_string(header->payload_bytes));
    e.fields.push_back({std::move(name), {}});
    AF_TRY_ASSIGN(e.fields.back().value, tensor_of(*header, payload));
  }
  AF_TRY_ASSIGN(std::string file, bytes(field));
  AF_TRY_ASSIGN(e.origin.record, i64(field));
  AF_TRY_ASSIGN(e.origin.offset, i64(field));
  if (!file.empty()) e.origin.file = intern_origin_file(file);
  return e;
}

expected<void> state_reader::done() const {
  if (!in_.empty()) return bad(std::to_string(in_.size()) + " bytes left over");
  return {};
}

}  // namespace af::data
