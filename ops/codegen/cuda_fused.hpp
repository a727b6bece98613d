#pragma once

// A fused program as CUDA C: one kernel, a grid-stride loop with one thread per output element,
// every intermediate in a register. Each input is read either per element or as one value
// broadcast everywhere (its stride argument, 1 or 0, says which). The source is compiled to PTX by
// NVRTC (ops/gpu.hpp) and cached by a hash of (source, arch, options). Generating the source needs
// no CUDA; compiling needs NVRTC but no GPU.

#include <cstdint>
#include <string>

#include "ops/graph/fused_program.hpp"

namespace af::codegen {

struct cuda_source {
  std::string kernel_name;  ///< "fused_<hash>": equal programs give equal names
  std::string source;
};

/// The CUDA C of `program`. Kernel parameters: for each input i `const T* in<i>, long long stride<i>`,
/// then `T* out, long long n`. unsupported for an op without a CUDA form, dtype_mismatch for a
/// type other than f32/f64.
expected<cuda_source> emit_cuda(const graph::fused_program& program);

/// PTX of `program` for `arch`, from the process-wide cache when that source, arch and option set
/// were compiled before.
expected<std::string> compile_cuda(const graph::fused_program& program, const std::string& arch = "compute_90");

/// Compilations the cache answered / NVRTC ran, since the process started.
struct cuda_cache_stats {
  uint64_t hits = 0;
  uint64_t compiles = 0;
};
cuda_cache_stats cuda_cache_counters();

}  // namespace af::codegen
