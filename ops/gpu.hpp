#pragma once

#include <string>

#include "ops/error.hpp"

/// The CUDA backend's entry points that do not depend on CUDA headers. Every function works in a
/// build without CUDA and on a machine without a GPU or driver: there is then simply no GPU.
namespace af::gpu {

/// True when this build contains the CUDA backend (the toolkit was found at configure time).
bool built_with_cuda() noexcept;

/// Usable CUDA devices: 0 without CUDA, without a driver, or on any CUDA error.
int device_count() noexcept;

/// One line for logs: "NVIDIA H200 (cc 9.0, 139 GiB)" or why there is no GPU.
std::string describe();

/// Compiles CUDA C++ `source` to PTX for a virtual architecture ("compute_90") with NVRTC. Runs
/// without a GPU. A compile error returns invalid_argument with NVRTC's log; unsupported without
/// CUDA in the build.
expected<std::string> compile_to_ptx(const std::string& source, const std::string& program_name,
                                     const std::string& arch = "compute_90");

}  // namespace af::gpu
