#include <cstdio>
#include <thread>

#include "apps/commands.hpp"
#include "ops/gpu.hpp"
#include "ops/parallel.hpp"

namespace af::apps {

int run_info(int, char**) {
  std::printf("actorflow 0.1.0\n");
  std::printf("cpu: %u hardware threads, kernel thread budget %d\n", std::thread::hardware_concurrency(),
              thread_budget());
  std::printf("cuda backend: %s\n", gpu::built_with_cuda() ? "built" : "not built");
  std::printf("gpu: %s\n", gpu::describe().c_str());
  return 0;
}

}  // namespace af::apps
