#pragma once

// scikit-learn's 8x8 handwritten digits (UCI "optdigits" test set, 1797 images) as TFRecord files
// of tf.train.Example, made offline from the CSV that Debian's python3-sklearn ships:
//   <sklearn>/datasets/data/digits.csv.gz, one image a line: 64 pixel values 0..16 (row-major
//   8x8), then the label 0..9, comma-separated.
//
// Each Example written has two features:
//   "image"  float_list of 64 values, row-major 8x8, pixel / 16 in [0, 1]
//   "label"  int64_list of 1 value, 0..9
//
// zlib stays inside digits.cpp: this header includes only the standard library and ops/.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/error.hpp"
#include "ops/tensor.hpp"

namespace af::digits {

/// Pixels per image (8x8) and the number of values on a CSV line (pixels then the label).
inline constexpr int64_t image_side = 8;
inline constexpr int64_t pixels_per_image = image_side * image_side;
inline constexpr int64_t csv_columns = pixels_per_image + 1;

/// Where Debian's python3-sklearn (or a pip install into /usr/local) puts digits.csv.gz: the first
/// existing one of /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz,
/// /usr/local/lib/python3*/dist-packages/... and /usr/lib/python3*/site-packages/...;
/// std::nullopt when none exists.
std::optional<std::string> find_sklearn_digits_csv();

/// A set of digit images and their labels, in file order.
struct digits_set {
  tensor images;  ///< f32 [n, 8, 8, 1], pixel / 16 in [0, 1]
  tensor labels;  ///< i64 [n], 0..9
};

/// Reads the CSV at `path`, gzip-compressed or plain (zlib reads both). Lines end in "\n" or
/// "\r\n"; fields may carry spaces around them; a number may be written "5" or "5.0" (the label
/// must be a whole number). Errors are malformed_input naming the file, the 1-based line number
/// and what is wrong: an empty line, a wrong column count, a field that is not a number, a pixel
/// outside 0..16, a label outside 0..9; a file with no lines is an error too, and one that cannot
/// be opened or decompressed is io_error / malformed_input naming the path.
expected<digits_set> read_digits_csv(const std::string& path);

struct split_options {
  /// Share of the images that go to the test file, in [0, 1]:
  /// test = llround(n * test_fraction) (halves away from zero), train = n - test.
  double test_fraction = 0.2;
  /// Seeds the shuffle (SplitMix64 + Fisher-Yates): the same seed gives the same split, and the
  /// same bytes in both files, on every platform.
  uint64_t seed = 42;
};

struct split_counts {
  int64_t train = 0;
  int64_t test = 0;
};

/// Shuffles the image indices with `options.seed`, then writes the first `test` of the shuffled
/// order to `<out_dir>/test.tfrecord` and the rest to `<out_dir>/train.tfrecord` (uncompressed),
/// each in shuffled order. `out_dir` is created when missing. Each file is written under a
/// temporary name in `out_dir` and renamed when complete, so a crash never leaves a half-written
/// file under the final name. invalid_argument for a test_fraction outside [0, 1] or a set whose
/// shapes/dtypes are not the ones read_digits_csv makes; io_error naming the path when writing fails.
expected<split_counts> write_digits_tfrecords(const digits_set& data, const std::string& out_dir,
                                              split_options options = {});

/// The shuffled order of 0..n-1 for `seed` that write_digits_tfrecords uses.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed);

}  // namespace af::digits
