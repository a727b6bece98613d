#pragma once

// Bytes of saved iterator state: little-endian integers, length-prefixed strings and elements
// (fields as tensor header + payload, origin as file, record, offset). Readers check every length
// against what is left, so a damaged state is malformed_input naming what was being read.
//
// Payloads start at a multiple of payload_alignment from the start of the whole state, so that a
// reader over an aligned copy of it hands out tensors that are views of that copy: restoring a
// shuffle buffer of thousands of elements then costs one copy and no allocation per tensor.

#include <cstdint>
#include <string>
#include <string_view>

#include "ops/element.hpp"
#include "ops/error.hpp"
#include "ops/tensor.hpp"
#include "serialization/tensor_codec.hpp"

namespace af::data {

inline constexpr std::size_t payload_alignment = 16;

class state_writer {
 public:
  /// Appends to `out`, whose first byte is the start of the whole state.
  explicit state_writer(std::string& out) : out_(out) {}
  void u64(uint64_t v);
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void bytes(std::string_view v);
  /// Errors only for tensors that cannot be made contiguous (out of memory).
  expected<void> put(const element& e);

 private:
  std::string& out_;
};

class state_reader {
 public:
  /// `what` names the state in errors ("stage 'shuffle'").
  state_reader(std::string_view in, std::string what) : in_(in), base_(in.data()), what_(std::move(what)) {}
  /// A reader whose elements' tensors are views of `whole` (u8, payload_alignment-aligned, the
  /// whole state from its first byte); `in` lies inside it.
  state_reader(std::string_view in, std::string what, tensor whole)
      : in_(in), base_(static_cast<const char*>(whole.raw_data())), what_(std::move(what)), whole_(std::move(whole)) {}
  expected<uint64_t> u64(const char* field);
  expected<int64_t> i64(const char* field);
  expected<std::string> bytes(const char* field);
  /// Like bytes(), without a copy: valid while the reader's input is.
  expected<std::string_view> view(const char* field);
  expected<element> get_element(const char* field);
  /// An error unless everything was read.
  expected<void> done() const;
  bool empty() const noexcept { return in_.empty(); }

 private:
  error bad(const std::string& why) const;
  expected<void> skip_padding(const char* field);
  expected<tensor> tensor_of(const tensor_header& header, std::string_view payload) const;
  std::string_view in_;
  const char* base_;  // the state's first byte: payload alignment counts from it
  std::string what_;
  tensor whole_;  // undefined: elements get tensors of their own
};

}  // namespace af::data
