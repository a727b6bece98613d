#pragma once

#include <cstddef>
#include <string>
#include <vector>

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

/// One input of a fused kernel run from host memory: one element per output element, or
/// (`broadcast`) a single element read everywhere.
struct kernel_input {
  const void* data = nullptr;
  bool broadcast = false;
};

/// What a timed run measured on the device (medians over the timed launches).
struct kernel_timing {
  double kernel_ms = 0;          ///< one launch of the kernel on device-resident data
  double copy_ms = 0;            ///< cudaMemcpy device to device of the bytes one launch moves
  std::size_t bytes_moved = 0;   ///< bytes one launch reads and writes
};

/// Loads `ptx` (a fused kernel as codegen::emit_cuda writes it: per input a pointer and a stride,
/// then the output pointer and n), runs kernel `name` over `n` elements of `element_size` bytes on
/// device 0 and copies the result to `out`. With `timed_launches` > 0 it then times that many
/// launches and as many copies of the same bytes. unsupported without a GPU; other errors name the
/// CUDA call that failed and the kernel.
expected<kernel_timing> run_fused_kernel(const std::string& ptx, const std::string& name,
                                         const std::vector<kernel_input>& inputs, void* out,
                                         std::size_t element_size, std::size_t n, int timed_launches = 0);

}  // namespace af::gpu
