// The fused kernels' step loops built for AVX-512 (16 floats per instruction); cpu_fused.cpp
// calls these when the CPU supports it. This file alone is compiled with AVX-512 enabled.

#include "ops/codegen/fused_steps.hpp"

namespace af::codegen {

void run_step_avx512(code c, float* o, const float* a, const float* b, int64_t n, affine<float> pre, affine<float> post) {
  run_step<float>(c, o, a, b, n, pre, post);
}
void run_step_avx512(code c, double* o, const double* a, const double* b, int64_t n, affine<double> pre,
                     affine<double> post) {
  run_step<double>(c, o, a, b, n, pre, post);
}

}  // namespace af::codegen
