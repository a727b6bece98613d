#pragma once

// Checks shared by the kernel tests.

#include <catch2/catch.hpp>

#include <string>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

/// The op failed with `code` and its message mentions `needle` (the op name, a shape, an index).
inline void check_error(const af::expected<af::tensor>& r, af::errc code, const std::string& needle) {
  REQUIRE_FALSE(r);
  INFO(r.error_value().to_string());
  CHECK(r.error_value().code == code);
  CHECK(r.error_value().message.find(needle) != std::string::npos);
}
