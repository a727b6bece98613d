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

}  // namespace af::gpu
