#include <catch2/catch.hpp>

#include "ops/gpu.hpp"

namespace {

constexpr const char* fused_kernel = R"(
extern "C" __global__ void fused_mul_add_relu(const float* x, const float* a, const float* b,
                                              float* out, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = fmaxf(x[i] * a[i] + b[i], 0.0f);
}
)";

}  // namespace

TEST_CASE("without a usable GPU the backend reports zero devices and says why", "[cpu][gpu]") {
  const int count = af::gpu::device_count();
  CHECK(count >= 0);
  if (count == 0) CHECK(af::gpu::describe().rfind("no GPU", 0) == 0);
}

TEST_CASE("NVRTC compiles a generated elementwise kernel to PTX without needing a GPU", "[cpu][gpu]") {
  auto ptx = af::gpu::compile_to_ptx(fused_kernel, "fused_mul_add_relu.cu");
  if (!af::gpu::built_with_cuda()) {
    REQUIRE_FALSE(ptx);
    CHECK(ptx.error_value().code == af::errc::unsupported);
    return;
  }
  REQUIRE(ptx);
  CHECK(ptx->find(".entry fused_mul_add_relu") != std::string::npos);
  CHECK(ptx->find(".target sm_90") != std::string::npos);
}

TEST_CASE("an NVRTC compile error comes back with the compiler's log", "[cpu][gpu]") {
  if (!af::gpu::built_with_cuda()) SUCCEED("built without CUDA");
  else {
    auto ptx = af::gpu::compile_to_ptx("extern \"C\" __global__ void k() { undefined_name(); }", "broken.cu");
    REQUIRE_FALSE(ptx);
    CHECK(ptx.error_value().code == af::errc::invalid_argument);
    CHECK(ptx.error_value().message.find("undefined_name") != std::string::npos);
    CHECK(ptx.error_value().message.find("broken.cu") != std::string::npos);
  }
}
