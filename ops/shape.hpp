#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "ops/error.hpp"
#include "ops/small_vector.hpp"

namespace af {

/// Most dimensions a shape keeps without a heap allocation.
inline constexpr std::size_t inline_dims = 6;
/// Dimensions of a tensor, outermost first. Strides are counted in elements, not bytes.
using shape = small_vector<int64_t, inline_dims>;
using strides = small_vector<int64_t, inline_dims>;

/// Product of the dimensions (1 for a scalar, 0 when any dimension is 0); INT64_MAX when it does not
/// fit in 64 bits (shapes from files and attributes), which no allocation can satisfy.
int64_t numel(const shape& s) noexcept;
/// Row-major strides of a contiguous tensor of shape `s`.
strides contiguous_strides(const shape& s);
/// "[2,3,4]"
std::string to_string(const shape& s);
/// NumPy broadcasting of two shapes; shape_mismatch naming `op` and both shapes when impossible.
expected<shape> broadcast_shapes(const shape& a, const shape& b, const char* op);
/// Maps a possibly negative axis into [0, rank); out_of_range naming `op` otherwise.
expected<int> normalize_axis(int64_t axis, int64_t rank, const char* op);

}  // namespace af
