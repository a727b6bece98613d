#pragma once

// The `actorflow` command as the README shows it, run in a scratch directory: what it printed and
// how it exited. AF_ACTORFLOW_PATH comes from tests/CMakeLists.txt.

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../support/child_process.hpp"

namespace af::testing {

/// `actorflow args...` in `cwd`, killed after `limit`.
inline program_result actorflow(std::vector<std::string> args, const std::filesystem::path& cwd,
                                std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  args.insert(args.begin(), AF_ACTORFLOW_PATH);
  return run_program(std::move(args), cwd, limit);
}

/// Everything a failed check should show about a run.
inline std::string describe(const program_result& r) {
  std::ostringstream s;
  s << "exit code " << r.exit_code << (r.timed_out ? " (timed out)" : "") << "\n--- stdout ---\n"
    << r.out << "\n--- stderr ---\n"
    << r.err;
  return s.str();
}

/// `args` joined by spaces, to name a run in a failure message.
inline std::string command_line(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + a;
  return out;
}

/// The lines of `text`, without their '\n'.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace af::testing
