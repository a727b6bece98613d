#include "serialization/digits.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

#include <zlib.h>

#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

namespace af::digits {

namespace {

namespace fs = std::filesystem;

// -- finding the file -----------------------------------------------------------------------------

constexpr std::string_view sklearn_relative = "sklearn/datasets/data/digits.csv.gz";

std::optional<std::string> existing(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p.string();
  return std::nullopt;
}

// Every `<root>/python3*/<packages>/sklearn/...` that exists, in name order (python3.11 before
// python3.12), so the choice does not depend on directory iteration order.
std::optional<std::string> search_versioned(const fs::path& root, std::string_view packages) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::nullopt;
  std::vector<fs::path> candidates;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.starts_with("python3")) candidates.push_back(it->path() / packages / sklearn_relative);
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& c : candidates)
    if (auto found = existing(c)) return found;
  return std::nullopt;
}

// -- reading --------------------------------------------------------------------------------------

// The whole (decompressed) file. gzread passes a file that is not gzip through unchanged.
expected<std::string> read_gzip_file(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return make_error(errc::io_error, path + ": cannot open for reading");
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    int n = gzread(file, buffer, sizeof buffer);
    if (n < 0) {
      int code = Z_OK;
      std::string why = gzerror(file, &code);
      gzclose(file);
      return make_error(code == Z_ERRNO ? errc::io_error : errc::malformed_input,
                        path + ": cannot decompress: " + why);
    }
    if (n == 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  // Z_BUF_ERROR is zlib's "unexpected end of file": gzread handed out what it decoded and then
  // reported a clean end, so a gzip file cut short (at a line end, even) would lose images silently.
  const int closed = gzclose(file);
  if (closed == Z_BUF_ERROR)
    return make_error(errc::malformed_input,
                      path + ": truncated gzip stream: the file ends after " + std::to_string(out.size()) +
                          " decompressed bytes, before the end of the compressed data");
  if (closed != Z_OK)
    return make_error(errc::malformed_input, path + ": cannot decompress (gzclose " + std::to_string(closed) + ")");
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A finite number filling the whole field, or nullopt.
std::optional<double> parse_number(std::string_view field) {
  if (field.empty()) return std::nullopt;
  if (field.front() == '+') field.remove_prefix(1);  // from_chars rejects a leading '+'
  double v = 0;
  auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec != std::errc{} || ptr != field.data() + field.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string quoted(std::string_view s) {
  constexpr std::size_t max_shown = 40;
  std::string out{"'"};
  out.append(s.substr(0, max_shown));
  if (s.size() > max_shown) out += "...";
  out += '\'';
  return out;
}

// Parses one line into 64 pixels (already divided by 16) and a label; the error text says what
// is wrong, without the file and line (the caller adds them).
expected<void> parse_line(std::string_view line, float* pixels, int64_t& label) {
  if (trim(line).empty()) return make_error(errc::malformed_input, "empty line");
  int64_t columns = 1 + std::count(line.begin(), line.end(), ',');
  if (columns != csv_columns)
    return make_error(errc::malformed_input, std::string{"expected "} + std::to_string(csv_columns) +
                                                 " comma-separated values (64 pixels and a label), found " +
                                                 std::to_string(columns));
  for (int64_t column = 0; column < csv_columns; ++column) {
    std::size_t comma = line.find(',');
    std::string_view field = trim(line.substr(0, comma));
    line = comma == std::string_view::npos ? std::string_view{} : line.substr(comma + 1);
    auto value = parse_number(field);
    if (column < pixels_per_image) {
      if (!value)
        return make_error(errc::malformed_input, std::string{"pixel "} + std::to_string(column) + " (column " +
                                                     std::to_string(column + 1) + ") is not a number: " +
                                                     quoted(field));
      if (*value < 0 || *value > 16)
        return make_error(errc::malformed_input, std::string{"pixel "} + std::to_string(column) + " (column " +
                                                     std::to_string(column + 1) + ") is " + std::string{field} +
                                                     ", outside 0..16");
      pixels[column] = static_cast<float>(*value / 16.0);
    } else {
      if (!value)
        return make_error(errc::malformed_input,
                          std::string{"label (column 65) is not a number: "} + quoted(field));
      if (*value < 0 || *value > 9 || *value != std::floor(*value))
        return make_error(errc::malformed_input,
                          std::string{"label (column 65) is "} + std::string{field} + ", not a whole number in 0..9");
      label = static_cast<int64_t>(*value);
    }
  }
  return {};
}

// -- shuffling ------------------------------------------------------------------------------------

// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator whose output is defined bit for bit, unlike
// std::uniform_int_distribution, so a seed names the same split everywhere.
struct splitmix64 {
  uint64_t state;
  uint64_t next() noexcept {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound > 0: rejects the few values that would bias the modulo.
  uint64_t below(uint64_t bound) noexcept {
    uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }
};

// -- writing --------------------------------------------------------------------------------------

std::string temp_name_for(const fs::path& final_path) {
  return final_path.string() + ".tmp." + std::to_string(::getpid());
}

// Writes the images `order[begin, end)` to `path` as Examples.
expected<void> write_records(const digits_set& data, const std::vector<int64_t>& order, std::size_t begin,
                             std::size_t end, const std::string& path) {
  AF_TRY_ASSIGN(auto writer, tfrecord_writer::open(path));
  const float* pixels = data.images.data<float>();
  const int64_t* labels = data.labels.data<int64_t>();
  example ex;
  std::string payload;
  for (std::size_t i = begin; i < end; ++i) {
    int64_t index = order[i];
    const float* image = pixels + index * pixels_per_image;
    ex.features["image"] = feature::floats(std::vector<float>(image, image + pixels_per_image));
    ex.features["label"] = feature::int64s({labels[index]});
    payload.clear();
    encode_example(ex, payload);
    AF_TRY(writer.write(payload));
  }
  return writer.close();
}

expected<void> check_set(const digits_set& data) {
  const tensor& images = data.images;
  const tensor& labels = data.labels;
  if (!images.defined() || !labels.defined())
    return make_error(errc::invalid_argument, "write_digits_tfrecords: images or labels undefined");
  if (images.type() != dtype::f32 || images.ndim() != 4 || images.dim(1) != image_side ||
      images.dim(2) != image_side || images.dim(3) != 1 || !images.is_contiguous())
    return make_error(errc::invalid_argument,
                      "write_digits_tfrecords: images must be a contiguous f32 [n,8,8,1] tensor");
  if (labels.type() != dtype::i64 || labels.ndim() != 1 || labels.dim(0) != images.dim(0) ||
      !labels.is_contiguous())
    return make_error(errc::invalid_argument,
                      "write_digits_tfrecords: labels must be a contiguous i64 [n] tensor with n = images.dim(0)");
  return {};
}

}  // namespace

std::optional<std::string> find_sklearn_digits_csv() {
  if (auto found = existing(fs::path{"/usr/lib/python3/dist-packages"} / sklearn_relative)) return found;
  if (auto found = existing(fs::path{"/usr/local/lib/python3/dist-packages"} / sklearn_relative)) return found;
  if (auto found = search_versioned("/usr/local/lib", "dist-packages")) return found;
  if (auto found = search_versioned("/usr/local/lib", "site-packages")) return found;
  if (auto found = search_versioned("/usr/lib", "dist-packages")) return found;
  if (auto found = search_versioned("/usr/lib", "site-packages")) return found;
  return std::nullopt;
}

expected<digits_set> read_digits_csv(const std::string& path) {
  AF_TRY_ASSIGN(std::string text, read_gzip_file(path));
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  std::string_view rest = text;
  int64_t line_number = 0;
  while (!rest.empty()) {
    ++line_number;
    std::size_t newline = rest.find('\n');
    std::string_view line = rest.substr(0, newline);
    rest = newline == std::string_view::npos ? std::string_view{} : rest.substr(newline + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    pixels.resize(pixels.size() + pixels_per_image);
    int64_t label = 0;
    if (auto parsed = parse_line(line, pixels.data() + pixels.size() - pixels_per_image, label); !parsed)
      return make_error(errc::malformed_input,
                        path + ":" + std::to_string(line_number) + ": " + parsed.error_value().message);
    labels.push_back(label);
  }
  if (labels.empty()) return make_error(errc::malformed_input, path + ": empty file: no digit images");
  auto n = static_cast<int64_t>(labels.size());
  digits_set out;
  out.images = tensor::from_vector(pixels, {n, image_side, image_side, 1});
  out.labels = tensor::from_vector(labels, {n});
  return out;
}

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(static_cast<std::size_t>(std::max<int64_t>(n, 0)));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  splitmix64 gen{seed};
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[gen.below(i)]);
  return order;
}

expected<split_counts> write_digits_tfrecords(const digits_set& data, const std::string& out_dir,
                                              split_options options) {
  if (!(options.test_fraction >= 0 && options.test_fraction <= 1))
    return make_error(errc::invalid_argument, std::string{"write_digits_tfrecords: test_fraction "} +
                                                  std::to_string(options.test_fraction) + " is outside [0, 1]");
  AF_TRY(check_set(data));
  int64_t n = data.labels.dim(0);
  split_counts counts;
  counts.test = std::clamp<int64_t>(std::llround(static_cast<double>(n) * options.test_fraction), 0, n);
  counts.train = n - counts.test;

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return make_error(errc::io_error, out_dir + ": cannot create directory: " + ec.message());

  std::vector<int64_t> order = shuffled_indices(n, options.seed);
  auto test_count = static_cast<std::size_t>(counts.test);
  const fs::path train_path = fs::path{out_dir} / "train.tfrecord";
  const fs::path test_path = fs::path{out_dir} / "test.tfrecord";
  const std::string train_temp = temp_name_for(train_path);
  const std::string test_temp = temp_name_for(test_path);
  auto discard_temps = [&] {
    std::error_code ignored;
    fs::remove(train_temp, ignored);
    fs::remove(test_temp, ignored);
  };
  // Both files complete under temporary names before either final name changes.
  if (auto ok = write_records(data, order, test_count, order.size(), train_temp); !ok) {
    discard_temps();
    return std::move(ok).error_value();
  }
  if (auto ok = write_records(data, order, 0, test_count, test_temp); !ok) {
    discard_temps();
    return std::move(ok).error_value();
  }
  for (const auto& [from, to] : {std::pair{train_temp, train_path}, std::pair{test_temp, test_path}}) {
    fs::rename(from, to, ec);
    if (ec) {
      discard_temps();
      return make_error(errc::io_error, from + ": cannot rename to " + to.string() + ": " + ec.message());
    }
  }
  return counts;
}

}  // namespace af::digits
