// Fuzzes digits::read_digits_csv, the reader of scikit-learn's digits CSV (plain or gzip).
//
// Input: a mode byte, then the file. Mode bit 0: gzip the file here first (the reader inflates
// what it reads; the shipped file is gzip), so mutations of the text reach the CSV parser through
// zlib as well; bit 1 then cuts 1 to 23 bytes off the end of the gzip file, which must fail.
// Raw bytes starting with gzip's magic reach zlib's error paths.
// Invariants: errors are malformed_input/io_error naming the file; a set that reads has n images
// of [n,8,8,1] pixels in [0,1] and n labels in 0..9, and printed back as CSV (pixel * 16 with
// every digit) it reads again to the same tensors, bit for bit.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "fuzz_support.hpp"
#include "serialization/digits.hpp"

namespace {

using af::fuzz::fail;
namespace digits = af::digits;

bool same_tensor(const af::tensor& a, const af::tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
}

std::string as_csv(const digits::digits_set& set) {
  std::string out;
  const float* pixels = set.images.data<float>();
  const int64_t* labels = set.labels.data<int64_t>();
  char number[40];
  for (int64_t i = 0; i < set.labels.dim(0); ++i) {
    for (int64_t p = 0; p < digits::pixels_per_image; ++p) {
      std::snprintf(number, sizeof number, "%.17g,", static_cast<double>(pixels[i * digits::pixels_per_image + p]) * 16);
      out += number;
    }
    out += std::to_string(labels[i]) + "\n";
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static af::fuzz::memory_file file;
  af::fuzz::input_reader in{af::fuzz::as_chars(data, size)};
  const uint8_t mode = in.byte();
  const bool gzip_here = mode & 1;
  std::string contents = gzip_here ? af::fuzz::compress(in.rest, true) : std::string(in.rest);
  const bool cut_short = gzip_here && (mode & 2);
  if (cut_short) contents.resize(contents.size() - std::min(contents.size(), std::size_t{1} + in.rest.size() % 23));
  file.assign(contents);

  auto set = digits::read_digits_csv(file.path());
  AF_FUZZ_CHECK(!cut_short || !set, "a gzip file cut short read as " + std::to_string(set->labels.dim(0)) + " images");
  if (!set) {
    af::fuzz::check_parse_error(set.error_value(), "read_digits_csv");
    AF_FUZZ_CHECK(set.error_value().message.find(file.path()) != std::string::npos,
          "read_digits_csv's error does not name the file: " + set.error_value().message);
    return 0;
  }
  const int64_t n = set->labels.dim(0);
  const af::shape image_dims{n, digits::image_side, digits::image_side, 1}, label_dims{n};
  AF_FUZZ_CHECK(n > 0 && set->images.shape() == image_dims && set->images.type() == af::dtype::f32 &&
                    set->labels.shape() == label_dims && set->labels.type() == af::dtype::i64,
        "a digits set of the wrong shapes: images " + af::to_string(set->images.shape()) + ", labels " +
            af::to_string(set->labels.shape()));
  const float* pixels = set->images.data<float>();
  for (int64_t i = 0; i < n * digits::pixels_per_image; ++i)
    AF_FUZZ_CHECK(pixels[i] >= 0 && pixels[i] <= 1, "pixel " + std::to_string(i) + " is " + std::to_string(pixels[i]));
  const int64_t* labels = set->labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) AF_FUZZ_CHECK(labels[i] >= 0 && labels[i] <= 9, "label " + std::to_string(labels[i]));

  file.assign(as_csv(*set));
  auto again = digits::read_digits_csv(file.path());
  if (!again) fail("a digits set printed as CSV does not read back: " + again.error_value().to_string());
  AF_FUZZ_CHECK(same_tensor(again->images, set->images) && same_tensor(again->labels, set->labels),
        "a digits set printed as CSV reads back different");
  return 0;
}
