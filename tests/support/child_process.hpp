#pragma once

// Runs a program of this build (the actorflow command, an example) as a child process, the way a
// user runs it from a shell, and collects its exit code, stdout and stderr. Every wait has a time
// limit: a child that outlives it is killed and reported as timed out, so a hanging program fails
// its test instead of hanging the suite. posix_spawn, not fork: test processes may run CAF threads.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace af::testing {

struct program_result {
  int exit_code = -1;  ///< the exit status; -1 when killed by a signal or never started
  bool timed_out = false;
  std::string out, err;
};

class child_process {
 public:
  using clock_type = std::chrono::steady_clock;

  /// Starts argv[0] (a path) with the other arguments in `cwd` (empty: this process's directory).
  explicit child_process(std::vector<std::string> argv, const std::filesystem::path& cwd = {}) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    if (::pipe2(err, O_CLOEXEC) != 0) {
      ::close(out[0]);
      ::close(out[1]);
      return;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    if (::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    close_fd(out_fd_);
    close_fd(err_fd_);
  }

  bool started() const noexcept { return pid_ > 0 || exited_; }

  /// The child's process id (-1 when it did not start): for /proc/<pid>/status.
  pid_t pid() const noexcept { return pid_; }

  /// SIGKILL now (a peer that dies); finish() then reports exit code -1.
  void kill() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
  }

  /// Sends `signal` (SIGTERM, SIGINT: asks a server to stop); finish() collects how it exited.
  void signal(int signal) {
    if (pid_ > 0) ::kill(pid_, signal);
  }

  /// The next whole line of stdout (without its '\n'); nullopt at the end of output or after `limit`.
  std::optional<std::string> read_line(std::chrono::milliseconds limit) {
    const auto deadline = clock_type::now() + limit;
    for (;;) {
      if (auto pos = out_.find('\n', line_start_); pos != std::string::npos) {
        std::string line = out_.substr(line_start_, pos - line_start_);
        line_start_ = pos + 1;
        return line;
      }
      if (out_fd_ < 0 || !pump(deadline)) return std::nullopt;
    }
  }

  /// Waits for the exit, killing the child after `limit`; all of stdout (lines read included) and
  /// stderr.
  program_result finish(std::chrono::milliseconds limit) {
    const auto deadline = clock_type::now() + limit;
    program_result r;
    while (out_fd_ >= 0 || err_fd_ >= 0)
      if (!pump(deadline)) break;
    if (pid_ > 0) {
      // Output closed (or time is up): the exit follows at once unless the child hangs.
      int status = 0;
      while (::waitpid(pid_, &status, WNOHANG) == 0) {
        if (clock_type::now() >= deadline) {
          r.timed_out = true;
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, &status, 0);
          break;
        }
        ::usleep(2000);
      }
      pid_ = -1;
      exited_ = true;
      exit_code_ = WIFEXITED(status) && !r.timed_out ? WEXITSTATUS(status) : -1;
    }
    r.exit_code = exit_code_;
    r.out = out_;
    r.err = err_;
    return r;
  }

 private:
  static void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  // Reads what is there on stdout and stderr; false when the deadline passed or both are closed.
  bool pump(clock_type::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    if (left <= 0) return false;
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left)) < 0) return errno == EINTR;
    drain(fds[0], out_fd_, out_);
    drain(fds[1], err_fd_, err_);
    return out_fd_ >= 0 || err_fd_ >= 0;
  }

  static void drain(const pollfd& p, int& fd, std::string& into) {
    if (fd < 0 || (p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) return;
    char chunk[65536];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) into.append(chunk, static_cast<std::size_t>(n));
    else close_fd(fd);
  }

  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  std::size_t line_start_ = 0;
};

/// Runs a program to its end (at most `limit`) and returns what it printed and its exit code.
inline program_result run_program(std::vector<std::string> argv, const std::filesystem::path& cwd = {},
                                  std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  child_process child{std::move(argv), cwd};
  return child.finish(limit);
}

}  // namespace af::testing
