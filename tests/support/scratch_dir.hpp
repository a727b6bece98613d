#pragma once

// A fresh temporary directory per test case, removed with everything in it afterwards.

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace af::testing {

struct scratch_dir {
  std::filesystem::path path;

  explicit scratch_dir(const std::string& prefix = "af_test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() { std::filesystem::remove_all(path); }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  std::string file(const std::string& name) const { return (path / name).string(); }
  /// Names of the files in the directory other than `except`.
  std::vector<std::string> others(const std::string& except) const {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(path))
      if (entry.path().filename() != except) out.push_back(entry.path().filename().string());
    return out;
  }
};

}  // namespace af::testing
