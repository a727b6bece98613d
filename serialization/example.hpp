#pragma once

// tf.train.Example in protobuf wire format, hand-written (no protobuf library):
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }     map entry: { string key = 1; Feature value = 2; }
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
//   Int64List { repeated int64 value = 1 [packed]; }
//
// Decoding follows protobuf's rules, as its reference parser applies them: packed and unpacked
// repeated fields; fields in any order; unknown fields skipped by wire type, groups (nested ones
// too) included; a known field with an unexpected wire type is an unknown field, skipped; a message
// field that appears more than once is merged (Example.features, a map entry's value: the later
// Feature's lists append to or, for another member of the oneof, replace the earlier ones); a
// repeated map key keeps its last entry; within a Feature the last list field decides the kind.
// Errors are malformed_input naming the field path and the byte offset of the field's tag, e.g.
//   "features.feature['image'].bytes_list: length 900 runs past the end at offset 37".
//
// Two ways to decode: decode_example builds an `example`; scan_example validates the bytes and
// lists each feature as a view into them, so a parser with a spec copies values straight from the
// wire into tensors (feature_spec.hpp) without building strings and vectors first.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ops/error.hpp"

namespace af {

/// Which list a Feature holds; `none` is a Feature message with no list set.
enum class feature_kind : uint8_t { none = 0, bytes_list = 1, float_list = 2, int64_list = 3 };

/// "bytes_list", "float_list", "int64_list", "none".
std::string_view to_string(feature_kind k) noexcept;

/// One feature's values. The variant's index equals the feature_kind.
struct feature {
  std::variant<std::monostate, std::vector<std::string>, std::vector<float>, std::vector<int64_t>> values;

  static feature bytes(std::vector<std::string> v) { return {{std::move(v)}}; }
  static feature floats(std::vector<float> v) { return {{std::move(v)}}; }
  static feature int64s(std::vector<int64_t> v) { return {{std::move(v)}}; }

  feature_kind kind() const noexcept { return static_cast<feature_kind>(values.index()); }
  /// Number of values (strings, floats or integers).
  std::size_t size() const noexcept;

  friend bool operator==(const feature&, const feature&) = default;
};

/// A tf.train.Example: features by name, ordered by name.
struct example {
  std::map<std::string, feature, std::less<>> features;

  /// The feature named `name`, or nullptr.
  const feature* find(std::string_view name) const noexcept {
    auto it = features.find(name);
    return it == features.end() ? nullptr : &it->second;
  }

  friend bool operator==(const example&, const example&) = default;
};

/// Canonical encoding, as TensorFlow writes it: map entries key then value, floats and int64s
/// packed, entries in name order.
std::string encode_example(const example& ex);
/// Appends the encoding of `ex` to `out`.
void encode_example(const example& ex, std::string& out);

/// Decodes and validates a serialized Example.
expected<example> decode_example(std::string_view bytes);

/// One feature as it sits in the wire bytes of a validated Example; values are read on demand.
struct feature_view {
  std::string_view name;
  feature_kind kind = feature_kind::none;
  std::size_t count = 0;        ///< number of values
  std::size_t byte_count = 0;   ///< bytes_list only: total bytes of all values
  /// The map entry's bytes (its value fields may be several Feature messages, merged), and the
  /// offset in them of the first list field whose values count: earlier lists of another kind
  /// were replaced by a later member of the oneof.
  std::string_view entry;
  std::size_t first_list = 0;
};

/// Validates the whole Example and lists its features in wire order into `out` (cleared first;
/// its capacity is reused). A name can appear twice: the later entry wins, as find_feature does.
expected<void> scan_example(std::string_view bytes, std::vector<feature_view>& out);

/// The last view named `name`, or nullptr.
const feature_view* find_feature(const std::vector<feature_view>& views, std::string_view name) noexcept;

/// Copies the `view.count` values of a float_list view to `out` (little-endian host).
void copy_floats(const feature_view& view, float* out) noexcept;
/// Copies the `view.count` values of an int64_list view to `out`.
void copy_int64s(const feature_view& view, int64_t* out) noexcept;
/// Copies the values of a bytes_list view back to back (`view.byte_count` bytes) to `out`.
void copy_bytes_concatenated(const feature_view& view, unsigned char* out) noexcept;
/// Appends the values of a bytes_list view (pointing into the Example bytes) to `out`.
void bytes_values(const feature_view& view, std::vector<std::string_view>& out);

}  // namespace af
