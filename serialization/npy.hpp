#pragma once

// NumPy's .npy files (format versions 1, 2 and 3): one array, a header that is a Python dict
// literal ({'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }), then the raw elements.
// Little-endian C-order arrays of f32, f64, f16, i8, u8, i32, i64 and bool are read and written;
// anything else (big-endian, Fortran order, object arrays, bf16, which NumPy lacks) is an error
// naming the file and the field.
//
//   auto x = af::npy::read("input.npy");           // f32[2,3]
//   af::npy::write("out.npy", y.value());

#include <string>
#include <string_view>

#include "ops/tensor.hpp"

namespace af::npy {

/// The array in `bytes`; malformed_input or unsupported naming `source` and what is wrong.
expected<tensor> decode(std::string_view bytes, std::string_view source = "npy");
expected<tensor> read(const std::string& path);

/// The .npy bytes of `t` (version 1.0; any layout, written in C order); unsupported for bf16.
expected<std::string> encode(const tensor& t);
expected<void> write(const std::string& path, const tensor& t);

}  // namespace af::npy
