#include "ops/gpu.hpp"

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <vector>

namespace af::gpu {

bool built_with_cuda() noexcept { return true; }

int device_count() noexcept {
  int count = 0;
  // Any error (no driver: 35, no device: 100, ...) means no GPU; we then use the CPU backend.
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

std::string describe() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    return std::string("no GPU: ") + cudaGetErrorString(status) + " (CUDA error " +
           std::to_string(static_cast<int>(status)) + ")";
  if (count == 0) return "no GPU: no CUDA device";
  std::string out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    if (!out.empty()) out += "; ";
    out += "cuda:" + std::to_string(i) + " " + prop.name + " (cc " + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
  }
  return out;
}

expected<std::string> compile_to_ptx(const std::string& source, const std::string& program_name,
                                     const std::string& arch) {
  nvrtcProgram program;
  nvrtcResult rc = nvrtcCreateProgram(&program, source.c_str(), program_name.c_str(), 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS)
    return make_error(errc::invalid_argument, "nvrtc: cannot create program '" + program_name +
                                                  "': " + nvrtcGetErrorString(rc));
  const std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str(), "--std=c++17", "--use_fast_math"};
  rc = nvrtcCompileProgram(program, 3, options);
  if (rc != NVRTC_SUCCESS) {
    std::size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    if (log_size) nvrtcGetProgramLog(program, log.data());
    nvrtcDestroyProgram(&program);
    return make_error(errc::invalid_argument,
                      "nvrtc: compiling '" + program_name + "' for " + arch + " failed: " + log);
  }
  std::size_t ptx_size = 0;
  nvrtcGetPTXSize(program, &ptx_size);
  std::string ptx(ptx_size, '\0');
  nvrtcGetPTX(program, ptx.data());
  nvrtcDestroyProgram(&program);
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

}  // namespace af::gpu
