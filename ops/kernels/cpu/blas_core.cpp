// Debian 12's OpenBLAS (0.3.21, built for every x86 core and choosing at load time) does not know
// recent Intel models and falls back to its Prescott (SSE3) kernels: on this project's 2-core
// Xeon, sgemm ran at 19 GFLOP/s instead of ~95. OpenBLAS 0.3.25 fixed the fallback; until Debian
// ships it, the library asks OpenBLAS to choose again, naming the kernels the CPU can run, when
// (and only when) it picked Prescott on a CPU with AVX2 and FMA and the user named no core type
// (OPENBLAS_CORETYPE). This happens at program start, before any BLAS call.

#include <cctype>
#include <cstdlib>
#include <string>

#include "ops/linalg.hpp"

// Present in OpenBLAS builds that choose kernels at load time (weak: other BLAS builds link too).
extern "C" {
__attribute__((weak)) void gotoblas_dynamic_init(void);
__attribute__((weak)) void gotoblas_dynamic_quit(void);
__attribute__((weak)) char* openblas_get_corename(void);
}

namespace af {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The kernels to ask for, or nullptr to leave OpenBLAS's choice alone.
const char* better_core() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return nullptr;
}

bool choose_blas_core() {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || !openblas_get_corename) return false;
  if (std::getenv("OPENBLAS_CORETYPE")) return false;  // the user's choice stands
  const char* core = openblas_get_corename();
  if (!core || lower(core) != "prescott") return false;
  const char* better = better_core();
  if (!better) return false;
  // OpenBLAS reads its core type from the environment when it chooses; it is not ours to keep.
  setenv("OPENBLAS_CORETYPE", better, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  return true;
}

// At program start: no thread can be inside BLAS yet.
const bool chosen_at_start = choose_blas_core();

}  // namespace

std::string blas_core_name() {
  (void)chosen_at_start;
  if (!openblas_get_corename) return "unknown";
  const char* core = openblas_get_corename();
  return core ? core : "unknown";
}

}  // namespace af
