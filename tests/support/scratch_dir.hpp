#pragma once

// A fresh temporary directory per test case, removed with everything in it afterwards, and a way
// to corrupt a file in it.

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
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

/// Flips one bit of the byte at `offset` of `path` in place (a corrupt file for bad-input tests).
inline void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace af::testing
