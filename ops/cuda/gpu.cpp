#include "ops/gpu.hpp"

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace af::gpu {

namespace {

// A CUDA call's failure as an error naming the call and the kernel it served.
error cuda_error(const char* call, cudaError_t status, const std::string& kernel) {
  return make_error(status == cudaErrorMemoryAllocation ? errc::out_of_memory : errc::io_error,
                    std::string("cuda: ") + call + " for '" + kernel + "' failed: " + cudaGetErrorString(status) +
                        " (CUDA error " + std::to_string(static_cast<int>(status)) + ")");
}

struct device_buffer {
  void* ptr = nullptr;
  ~device_buffer() {
    if (ptr) cudaFree(ptr);
  }
};

struct loaded_library {
  cudaLibrary_t handle = nullptr;
  ~loaded_library() {
    if (handle) cudaLibraryUnload(handle);
  }
};

struct event_pair {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~event_pair() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

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

expected<kernel_timing> run_fused_kernel(const std::string& ptx, const std::string& name,
                                         const std::vector<kernel_input>& inputs, void* out,
                                         std::size_t element_size, std::size_t n, int timed_launches) {
  if (device_count() == 0) return make_error(errc::unsupported, "cuda: cannot run '" + name + "': " + describe());
  cudaError_t status;
  auto check = [&](const char* call) -> expected<void> {
    if (status != cudaSuccess) return cuda_error(call, status, name);
    return {};
  };
  // Every argument travels by address: per input a device pointer and a stride, then out and n.
  std::vector<device_buffer> buffers(inputs.size() + 1);
  std::vector<void*> pointers(inputs.size() + 1);
  std::vector<long long> strides(inputs.size());
  std::size_t bytes_moved = n * element_size;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::size_t bytes = inputs[i].broadcast ? element_size : n * element_size;
    status = cudaMalloc(&buffers[i].ptr, bytes);
    AF_TRY(check("cudaMalloc"));
    status = cudaMemcpy(buffers[i].ptr, inputs[i].data, bytes, cudaMemcpyHostToDevice);
    AF_TRY(check("cudaMemcpy to the device"));
    pointers[i] = buffers[i].ptr;
    strides[i] = inputs[i].broadcast ? 0 : 1;
    bytes_moved += inputs[i].broadcast ? 0 : bytes;
  }
  status = cudaMalloc(&buffers.back().ptr, n * element_size);
  AF_TRY(check("cudaMalloc"));
  pointers.back() = buffers.back().ptr;
  long long count = static_cast<long long>(n);
  std::vector<void*> args;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    args.push_back(&pointers[i]);
    args.push_back(&strides[i]);
  }
  args.push_back(&pointers.back());
  args.push_back(&count);

  loaded_library library;
  status = cudaLibraryLoadData(&library.handle, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  AF_TRY(check("cudaLibraryLoadData"));
  cudaKernel_t kernel = nullptr;
  status = cudaLibraryGetKernel(&kernel, library.handle, name.c_str());
  AF_TRY(check("cudaLibraryGetKernel"));
  int sms = 0;
  status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  AF_TRY(check("cudaDeviceGetAttribute"));
  // A grid-stride loop: enough blocks to fill every SM a few times, never more than the work.
  const unsigned threads = 256;
  const std::size_t wanted = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(wanted, 8u * static_cast<unsigned>(sms))));
  auto launch = [&] {
    return cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(blocks), dim3(threads), args.data(), 0, nullptr);
  };
  status = launch();
  AF_TRY(check("cudaLaunchKernel"));
  status = cudaDeviceSynchronize();
  AF_TRY(check("the kernel"));
  status = cudaMemcpy(out, buffers.back().ptr, n * element_size, cudaMemcpyDeviceToHost);
  AF_TRY(check("cudaMemcpy to the host"));

  kernel_timing timing;
  timing.bytes_moved = bytes_moved;
  if (timed_launches <= 0) return timing;
  event_pair events;
  status = cudaEventCreate(&events.start);
  AF_TRY(check("cudaEventCreate"));
  status = cudaEventCreate(&events.stop);
  AF_TRY(check("cudaEventCreate"));
  const std::size_t copy_bytes = bytes_moved / 2;
  device_buffer copy_source, copy_target;
  status = cudaMalloc(&copy_source.ptr, copy_bytes);
  AF_TRY(check("cudaMalloc"));
  status = cudaMalloc(&copy_target.ptr, copy_bytes);
  AF_TRY(check("cudaMalloc"));
  auto time_one = [&](auto&& work, const char* what) -> expected<double> {
    status = cudaEventRecord(events.start);
    AF_TRY(check("cudaEventRecord"));
    status = work();
    AF_TRY(check(what));
    status = cudaEventRecord(events.stop);
    AF_TRY(check("cudaEventRecord"));
    status = cudaEventSynchronize(events.stop);
    AF_TRY(check(what));
    float ms = 0;
    status = cudaEventElapsedTime(&ms, events.start, events.stop);
    AF_TRY(check("cudaEventElapsedTime"));
    return static_cast<double>(ms);
  };
  // The baseline moves the same bytes: a copy reads half and writes half of them.
  auto copy = [&] { return cudaMemcpy(copy_target.ptr, copy_source.ptr, copy_bytes, cudaMemcpyDeviceToDevice); };
  std::vector<double> kernel_ms, copy_ms;
  for (int i = 0; i < timed_launches; ++i) {
    AF_TRY_ASSIGN(double k, time_one(launch, "cudaLaunchKernel"));
    AF_TRY_ASSIGN(double c, time_one(copy, "cudaMemcpy device to device"));
    kernel_ms.push_back(k);
    copy_ms.push_back(c);
  }
  timing.kernel_ms = median(kernel_ms);
  timing.copy_ms = median(copy_ms);
  return timing;
}

}  // namespace af::gpu
