#include "bench/loadgen_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace af::bench {

std::optional<std::string> run_loadgen_process(const std::vector<std::string>& args, const std::function<void()>& tick) {
  const std::string program = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "bench_loadgen").string();
  std::vector<std::string> owned{program};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    std::perror("bench_loadgen: pipe");
    return std::nullopt;
  }
  const pid_t child = fork();
  if (child == 0) {  // only async-signal-safe calls until exec: this process has other threads
    dup2(out[1], 1);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  if (child < 0) {
    close(out[0]);
    std::perror("bench_loadgen: fork");
    return std::nullopt;
  }
  std::string text;
  char buf[4096];
  for (;;) {
    pollfd p{out[0], POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    tick();
    if (ready <= 0) continue;
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench_loadgen (%s) ended with status %d\n", program.c_str(), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return std::nullopt;
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const auto last = text.rfind('\n');
  return last == std::string::npos ? text : text.substr(last + 1);
}

double json_number(const std::string& line, const std::string& key) {
  const std::string quoted = "\"" + key + "\": ";
  const auto at = line.find(quoted);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + quoted.size(), nullptr);
}

}  // namespace af::bench
