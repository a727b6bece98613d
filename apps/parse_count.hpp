#pragma once

// Counts given on the command line (--epochs, --batches): whole numbers from 1 up. atoi would read
// "x" as 0 and "-3" as -3, and a demo would then run on nothing or never end.

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace af::apps {

/// `text` as an integer >= 1, or nullopt when it is anything else.
inline std::optional<int64_t> parse_count(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < 1) return std::nullopt;
  return value;
}

}  // namespace af::apps
