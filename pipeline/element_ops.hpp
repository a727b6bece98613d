#pragma once

// Field-by-field operations on elements that the dataset transformations are made of (pure
// functions, no actors): stacking a batch, padding, splitting a batch, slicing columns, zipping.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/element.hpp"
#include "ops/error.hpp"
#include "ops/shape.hpp"

namespace af::data {

/// Target shapes for padded_batch, per field name; -1 in a dimension means "largest in the batch".
/// Fields not listed pad every dimension to the largest in the batch.
using padded_shapes = std::vector<std::pair<std::string, shape>>;

/// Stacks the fields of `items` along a new first dimension. Every element must have the same
/// field names and, per field, the same dtype and shape: else shape_mismatch/dtype_mismatch naming
/// the field, the element's position in the batch and both shapes.
expected<element> stack_elements(const std::vector<element>& items);

/// Like stack_elements, padding each field with `value` up to its target shape (see padded_shapes);
/// fields must agree on dtype and rank. A target smaller than an element's extent is an error.
expected<element> pad_and_stack(const std::vector<element>& items, const padded_shapes& targets,
                                double value);

/// Splits every field of `batch` along its first dimension (views, no copy). All fields must have
/// the same leading size; scalars cannot be unbatched.
expected<std::vector<element>> unbatch_element(const element& batch);

/// Row `index` of every field of `columns` (a view), with the first dimension removed.
expected<element> slice_row(const element& columns, int64_t index);

/// Leading size shared by every field of `columns` (the number of slices), or an error naming the
/// field that disagrees.
expected<int64_t> leading_size(const element& columns);

/// The fields of `parts` side by side; a field name that appears twice is an error naming it.
expected<element> merge_fields(std::vector<element>&& parts);

/// An u8 tensor holding the bytes of `text` (how names and raw records travel in elements).
tensor bytes_tensor(std::string_view text);
/// The bytes of an u8 tensor as a string; an error when the field is missing or not u8.
expected<std::string> field_as_string(const element& e, const std::string& field);

}  // namespace af::data
