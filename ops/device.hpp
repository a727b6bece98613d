#pragma once

#include <cstdint>
#include <string>

namespace af {

enum class device_type : uint8_t { cpu = 0, cuda = 1 };

/// Where a tensor's storage lives: the CPU or one CUDA device.
struct device {
  device_type type = device_type::cpu;
  int index = 0;

  static constexpr device cpu() noexcept { return {device_type::cpu, 0}; }
  static constexpr device cuda(int i) noexcept { return {device_type::cuda, i}; }
  bool is_cpu() const noexcept { return type == device_type::cpu; }
  friend bool operator==(const device&, const device&) = default;
};

/// "cpu" or "cuda:1"
std::string to_string(device d);

}  // namespace af
