// The CUDA entry points of a build without the CUDA toolkit: there is no GPU, and saying why.
#include "ops/gpu.hpp"

namespace af::gpu {

bool built_with_cuda() noexcept { return false; }

int device_count() noexcept { return 0; }

std::string describe() { return "no GPU: actorflow was built without CUDA"; }

expected<std::string> compile_to_ptx(const std::string&, const std::string& program_name,
                                     const std::string&) {
  return make_error(errc::unsupported, "nvrtc: cannot compile '" + program_name +
                                           "': actorflow was built without CUDA");
}

expected<kernel_timing> run_fused_kernel(const std::string&, const std::string& name,
                                         const std::vector<kernel_input>&, void*, std::size_t, std::size_t, int) {
  return make_error(errc::unsupported, "cuda: cannot run '" + name + "': actorflow was built without CUDA");
}

}  // namespace af::gpu
