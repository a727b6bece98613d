#include <cstdio>
#include <string_view>
#include <thread>

#include "apps/commands.hpp"
#include "ops/gpu.hpp"
#include "ops/parallel.hpp"

namespace af::apps {

int run_info(int argc, char** argv) {
  // It takes nothing: a flag meant for another command is a mistake worth saying.
  if (argc > 1) {
    const bool help = std::string_view{argv[1]} == "--help" || std::string_view{argv[1]} == "-h";
    std::fprintf(help ? stdout : stderr, "%s%s%susage: actorflow info\n", help ? "" : "actorflow info: unknown argument '",
                 help ? "" : argv[1], help ? "" : "'\n");
    return help ? 0 : 2;
  }
  std::printf("actorflow 0.1.0\n");
  std::printf("cpu: %u hardware threads, kernel thread budget %d\n", std::thread::hardware_concurrency(),
              thread_budget());
  std::printf("cuda backend: %s\n", gpu::built_with_cuda() ? "built" : "not built");
  std::printf("gpu: %s\n", gpu::describe().c_str());
  return 0;
}

}  // namespace af::apps
