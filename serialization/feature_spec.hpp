#pragma once

// Parsing serialized tf.train.Examples into elements of tensors with a feature spec, like
// tf.io.parse_example with FixedLenFeature / VarLenFeature.
//
// Each spec dtype names the Feature list it reads:
//   f32 ← float_list,  i64 ← int64_list,  u8 ← bytes_list (the bytes of the values, back to back).
//
// fixed_len(dtype, shape, default): the value count must equal numel(shape); the tensor has that
//   shape. For u8 (bytes_list) the *bytes* are counted: shape [32,32,3] takes 3072 bytes (one value
//   of 3072 bytes, as an encoded raw image usually is). Shape [] takes exactly one bytes value and
//   gives a 1-D u8 tensor of its bytes, whatever its length. A missing feature (or a Feature with no
//   list set) takes the default; without one it is an error.
// var_len(dtype, ...): any number of values; a missing feature has none.
//   padded: "<name>" is a 1-D tensor of the values, padded with pad_value to pad_to when pad_to >=
//           0 (more values than pad_to is an error). In a batch: [batch, L], L = pad_to or the
//           longest row.
//   ragged: "<name>" holds all values back to back (1-D) and "<name>/row_lengths" (i64, [batch],
//           [1] for one example) how many belong to each example — tf.RaggedTensor.from_row_lengths.
//
// Errors are malformed_input (or invalid_argument for a bad spec) naming the feature; a batch
// also names the example's index in the batch. Callers add the file, record and offset.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ops/element.hpp"
#include "ops/error.hpp"
#include "ops/shape.hpp"
#include "ops/tensor.hpp"
#include "serialization/example.hpp"

namespace af {

enum class var_len_layout : uint8_t { padded, ragged };

/// How to parse one feature. Build with fixed_len() or var_len().
struct feature_def {
  bool fixed = true;
  dtype type = dtype::f32;
  af::shape dims;                       ///< fixed_len: shape of one example's tensor
  std::optional<tensor> default_value;  ///< fixed_len: used when the feature is missing
  var_len_layout layout = var_len_layout::padded;  ///< var_len
  int64_t pad_to = -1;                  ///< var_len padded: fixed row length, -1 = longest row
  double pad_value = 0;                 ///< var_len padded: fill value
};

feature_def fixed_len(dtype type, af::shape dims, std::optional<tensor> default_value = std::nullopt);
feature_def var_len(dtype type, var_len_layout layout = var_len_layout::padded, int64_t pad_to = -1,
                    double pad_value = 0);

struct feature_spec_entry {
  std::string name;
  feature_def def;
};
/// Output fields follow the spec's order (a ragged feature adds "<name>/row_lengths" after it).
using feature_spec = std::vector<feature_spec_entry>;

/// Which list a spec dtype reads: f32 → float_list, i64 → int64_list, u8 → bytes_list.
expected<feature_kind> wanted_kind(dtype type);
/// Checks dtypes, shapes and defaults of a spec once; invalid_argument naming the feature.
expected<void> validate(const feature_spec& spec);

/// Parses many Examples with one spec, reusing its scratch space: create one per thread/actor.
class example_parser {
 public:
  /// Validates the spec.
  static expected<example_parser> make(feature_spec spec);

  /// One Example → one element (no batch dimension).
  expected<element> parse(std::string_view serialized);
  /// A batch of Examples → one element whose tensors have a leading batch dimension.
  expected<element> parse_batch(std::span<const std::string_view> serialized);

  const feature_spec& spec() const noexcept { return spec_; }

 private:
  explicit example_parser(feature_spec spec) : spec_(std::move(spec)) {}
  expected<element> parse_many(std::span<const std::string_view> serialized, bool batched);

  feature_spec spec_;
  std::vector<feature_view> views_;    // scan scratch of one example
  std::vector<feature_view> matched_;  // [example][spec entry]; kind none = missing
};

/// One-off convenience around example_parser::parse (validates the spec each call).
expected<element> parse_example(std::string_view serialized, const feature_spec& spec);
/// One-off convenience around example_parser::parse_batch.
expected<element> parse_examples(std::span<const std::string_view> serialized, const feature_spec& spec);

}  // namespace af
