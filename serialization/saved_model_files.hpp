#pragma once

// The files of a SavedModel directory and its manifest; shared by saved_model_save.cpp and
// saved_model_load.cpp only.

#include <string>
#include <string_view>
#include <vector>

#include "ops/error.hpp"

namespace af::saved_model::detail {

inline constexpr std::string_view model_file = "saved_model.afm";
inline constexpr std::string_view manifest_file = "MANIFEST";
inline constexpr std::string_view variables_dir = "variables";
inline constexpr std::string_view variables_data = "variables/data";
inline constexpr std::string_view assets_dir = "assets";

struct manifest_entry {
  std::string path;    ///< relative, '/'-separated
  std::string sha256;  ///< 64 lowercase hex digits
};

/// "<sha256>  <path>\n" per entry, sorted by path.
std::string render_manifest(std::vector<manifest_entry> entries);
/// The inverse; malformed_input naming `source` and the line for anything else (a path that leaves
/// the directory, a digest that is not 64 hex digits, a path listed twice).
expected<std::vector<manifest_entry>> parse_manifest(std::string_view text, const std::string& source);

/// The whole file; io_error naming it.
expected<std::string> read_file(const std::string& path);
/// Writes `bytes` as `path` (created or truncated) and flushes it to disk; io_error naming it.
expected<void> write_file(const std::string& path, std::string_view bytes);

}  // namespace af::saved_model::detail
