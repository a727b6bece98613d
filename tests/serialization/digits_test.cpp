#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <zlib.h>

#include "../support/scratch_dir.hpp"
#include "serialization/digits.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

using af::errc;
using af::testing::scratch_dir;
namespace digits = af::digits;

namespace {

// Pixel p of test image `seed`: the first three pixels spell `seed` in base 17, so images 0..4912
// all differ; the rest vary too.
int pixel_value(int seed, int p) {
  if (p < 3) return seed / (p == 0 ? 1 : p == 1 ? 17 : 289) % 17;
  return (seed * 7 + p * 3) % 17;
}

// One CSV line: 64 pixels then the label seed % 10.
std::string csv_line(int seed) {
  std::string line;
  for (int p = 0; p < 64; ++p) line += std::to_string(pixel_value(seed, p)) + ",";
  line += std::to_string(seed % 10);
  return line;
}

std::string csv_text(int rows) {
  std::string text;
  for (int r = 0; r < rows; ++r) text += csv_line(r) + "\n";
  return text;
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!text.empty()) REQUIRE(gzwrite(f, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct decoded {
  std::vector<std::vector<float>> images;
  std::vector<int64_t> labels;
};

decoded read_records(const std::string& path) {
  decoded out;
  auto reader = af::tfrecord_reader::open(path);
  REQUIRE(reader);
  for (;;) {
    auto rec = reader->next();
    REQUIRE(rec);
    if (!*rec) break;
    auto ex = af::decode_example((*rec)->data);
    REQUIRE(ex);
    REQUIRE(ex->features.size() == 2);
    const auto* image = ex->find("image");
    const auto* label = ex->find("label");
    REQUIRE(image != nullptr);
    REQUIRE(label != nullptr);
    REQUIRE(image->kind() == af::feature_kind::float_list);
    REQUIRE(label->kind() == af::feature_kind::int64_list);
    REQUIRE(image->size() == 64);
    REQUIRE(label->size() == 1);
    out.images.push_back(std::get<std::vector<float>>(image->values));
    out.labels.push_back(std::get<std::vector<int64_t>>(label->values)[0]);
  }
  return out;
}

std::vector<float> image_of(const digits::digits_set& set, int64_t i) {
  const float* p = set.images.data<float>() + i * 64;
  return {p, p + 64};
}

// The error message for a file whose line 3 is `bad` (lines 1, 2 and 4 are good).
std::string error_for_line_3(const scratch_dir& dir, const std::string& bad) {
  std::string path = dir.file("bad.csv.gz");
  write_gzip(path, csv_line(0) + "\n" + csv_line(1) + "\n" + bad + "\n" + csv_line(3) + "\n");
  auto set = digits::read_digits_csv(path);
  REQUIRE_FALSE(set);
  CHECK(set.error_value().code == errc::malformed_input);
  const std::string& message = set.error_value().message;
  CHECK(message.find(path + ":3:") != std::string::npos);
  return message;
}

}  // namespace

TEST_CASE("a gzip digits CSV parses into f32 images over 16 and i64 labels", "[cpu][digits]") {
  scratch_dir dir{"af_digits"};
  std::string path = dir.file("d.csv.gz");
  // Spaces, "5.0" numbers, a CRLF line and no final newline are all accepted.
  std::string text = csv_line(0) + "\r\n" + csv_line(1) + "\n";
  std::string spaced;
  for (int p = 0; p < 64; ++p) spaced += (p == 0 ? std::string{" 16.0 "} : std::string{"8"}) + ",";
  spaced += " 7 ";
  text += spaced;
  write_gzip(path, text);

  auto set = digits::read_digits_csv(path);
  REQUIRE(set);
  REQUIRE(set->images.type() == af::dtype::f32);
  REQUIRE(set->images.shape() == af::shape{3, 8, 8, 1});
  REQUIRE(set->labels.type() == af::dtype::i64);
  REQUIRE(set->labels.shape() == af::shape{3});
  const int64_t* labels = set->labels.data<int64_t>();
  CHECK(labels[0] == 0);
  CHECK(labels[1] == 1);
  CHECK(labels[2] == 7);
  for (int r = 0; r < 2; ++r)
    for (int p = 0; p < 64; ++p)
      CHECK(image_of(*set, r)[p] == static_cast<float>(pixel_value(r, p)) / 16.0f);
  CHECK(image_of(*set, 2)[0] == 1.0f);
  CHECK(image_of(*set, 2)[1] == 0.5f);
}

TEST_CASE("each kind of malformed line is an error naming the file, the line and the fault", "[cpu][digits]") {
  scratch_dir dir{"af_digits"};
  std::string good = csv_line(2);

  // Wrong column counts.
  CHECK_THAT(error_for_line_3(dir, good + ",3"), Catch::Contains("found 66"));
  CHECK_THAT(error_for_line_3(dir, good.substr(0, good.rfind(','))), Catch::Contains("found 64"));
  // A field that is not a number, and an empty field.
  std::string letter = std::string{"x"} + good.substr(good.find(','));
  CHECK_THAT(error_for_line_3(dir, letter), Catch::Contains("pixel 0 (column 1) is not a number: 'x'"));
  CHECK_THAT(error_for_line_3(dir, std::string{"0,,"} + good.substr(good.find(',', good.find(',') + 1) + 1)),
             Catch::Contains("pixel 1 (column 2) is not a number"));
  CHECK_THAT(error_for_line_3(dir, good.substr(0, good.rfind(',') + 1) + "seven"),
             Catch::Contains("label (column 65) is not a number: 'seven'"));
  // Pixels outside 0..16.
  CHECK_THAT(error_for_line_3(dir, std::string{"17"} + good.substr(good.find(','))), Catch::Contains("pixel 0 (column 1) is 17, outside 0..16"));
  CHECK_THAT(error_for_line_3(dir, std::string{"-1"} + good.substr(good.find(','))), Catch::Contains("outside 0..16"));
  // Labels outside 0..9 or not whole.
  std::string head = good.substr(0, good.rfind(',') + 1);
  CHECK_THAT(error_for_line_3(dir, head + "10"), Catch::Contains("label (column 65) is 10, not a whole number in 0..9"));
  CHECK_THAT(error_for_line_3(dir, head + "-1"), Catch::Contains("not a whole number in 0..9"));
  CHECK_THAT(error_for_line_3(dir, head + "2.5"), Catch::Contains("not a whole number in 0..9"));
  // An empty line in the middle.
  CHECK_THAT(error_for_line_3(dir, ""), Catch::Contains("empty line"));
}

TEST_CASE("a gzip file cut short is an error, even where the cut falls at a line end", "[cpu][digits]") {
  // Found while writing fuzz_digits_csv (its cut-short check): zlib reports the missing end only
  // when the file is closed, and the reader took that for a clean end, returning the images
  // decoded so far.
  scratch_dir dir{"af_digits"};
  const std::string path = dir.file("cut.csv.gz");
  // A gzip header and two lines, sync-flushed (so the deflate data for them is complete), and
  // nothing after: a file whose third line and trailer were lost.
  std::string cut;
  {
    z_stream zs{};
    REQUIRE(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string text = csv_line(0) + "\n" + csv_line(1) + "\n";
    std::string out(4096, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(text.data());
    zs.avail_in = static_cast<uInt>(text.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    REQUIRE(deflate(&zs, Z_SYNC_FLUSH) == Z_OK);
    out.resize(out.size() - zs.avail_out);
    deflateEnd(&zs);
    cut = out;
  }
  std::ofstream(path, std::ios::binary) << cut;
  auto set = digits::read_digits_csv(path);
  REQUIRE_FALSE(set);
  CHECK(set.error_value().code == errc::malformed_input);
  CHECK_THAT(set.error_value().message, Catch::Contains(path) && Catch::Contains("truncated gzip stream"));

  SECTION("and so is a complete stream without its 8-byte trailer") {
    std::string whole = dir.file("whole.csv.gz");
    write_gzip(whole, csv_text(3));
    std::string bytes = read_file(whole);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 8);
    auto no_trailer = digits::read_digits_csv(path);
    REQUIRE_FALSE(no_trailer);
    CHECK_THAT(no_trailer.error_value().message, Catch::Contains("truncated gzip stream"));
  }
}

TEST_CASE("an empty or missing digits file is an error", "[cpu][digits]") {
  scratch_dir dir{"af_digits"};
  std::string empty = dir.file("empty.csv.gz");
  write_gzip(empty, "");
  auto set = digits::read_digits_csv(empty);
  REQUIRE_FALSE(set);
  CHECK(set.error_value().code == errc::malformed_input);
  CHECK_THAT(set.error_value().message, Catch::Contains(empty) && Catch::Contains("empty file"));

  auto missing = digits::read_digits_csv(dir.file("missing.csv.gz"));
  REQUIRE_FALSE(missing);
  CHECK(missing.error_value().code == errc::io_error);
  CHECK_THAT(missing.error_value().message, Catch::Contains("missing.csv.gz"));
}

TEST_CASE("the split is 80/20 rounded to nearest and the same bytes for the same seed", "[cpu][digits]") {
  scratch_dir dir{"af_digits"};
  std::string csv = dir.file("d.csv.gz");
  write_gzip(csv, csv_text(103));
  auto set = digits::read_digits_csv(csv);
  REQUIRE(set);

  // 103 * 0.2 = 20.6 rounds to 21 test images.
  auto a = digits::write_digits_tfrecords(*set, dir.file("a"));
  REQUIRE(a);
  CHECK(a->test == 21);
  CHECK(a->train == 82);
  auto b = digits::write_digits_tfrecords(*set, dir.file("b"), {0.2, 42});
  REQUIRE(b);
  CHECK(read_file(dir.file("a/train.tfrecord")) == read_file(dir.file("b/train.tfrecord")));
  CHECK(read_file(dir.file("a/test.tfrecord")) == read_file(dir.file("b/test.tfrecord")));
  // Only the two final files are left: the temporaries were renamed.
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("a"))) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"test.tfrecord", "train.tfrecord"});

  auto c = digits::write_digits_tfrecords(*set, dir.file("c"), {0.2, 43});
  REQUIRE(c);
  CHECK(c->test == 21);
  CHECK(read_file(dir.file("a/test.tfrecord")) != read_file(dir.file("c/test.tfrecord")));
  CHECK(read_file(dir.file("a/train.tfrecord")) != read_file(dir.file("c/train.tfrecord")));

  // Rounding at the edges and other fractions; 0.5 of 103 = 51.5 rounds away from zero to 52.
  for (auto [fraction, test] : std::array<std::pair<double, int64_t>, 4>{{{0.0, 0}, {1.0, 103}, {0.5, 52}, {0.1, 10}}}) {
    auto counts = digits::write_digits_tfrecords(*set, dir.file("f"), {fraction, 1});
    REQUIRE(counts);
    CHECK(counts->test == test);
    CHECK(counts->train == 103 - test);
  }
  auto bad = digits::write_digits_tfrecords(*set, dir.file("g"), {1.5, 1});
  REQUIRE_FALSE(bad);
  CHECK(bad.error_value().code == errc::invalid_argument);
}

TEST_CASE("the shuffle is a fixed permutation of the indices for a seed", "[cpu][digits]") {
  auto a = digits::shuffled_indices(1000, 7);
  CHECK(a == digits::shuffled_indices(1000, 7));
  CHECK(a != digits::shuffled_indices(1000, 8));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[static_cast<std::size_t>(i)] == i);
  CHECK(digits::shuffled_indices(0, 7).empty());
  CHECK(digits::shuffled_indices(1, 7) == std::vector<int64_t>{0});
}

TEST_CASE("records decode back to the same images and labels, each image in exactly one file", "[cpu][digits]") {
  scratch_dir dir{"af_digits"};
  std::string csv = dir.file("d.csv.gz");
  write_gzip(csv, csv_text(50));
  auto set = digits::read_digits_csv(csv);
  REQUIRE(set);
  auto counts = digits::write_digits_tfrecords(*set, dir.file("out"), {0.2, 5});
  REQUIRE(counts);
  CHECK(counts->train == 40);
  CHECK(counts->test == 10);

  decoded train = read_records(dir.file("out/train.tfrecord"));
  decoded test = read_records(dir.file("out/test.tfrecord"));
  REQUIRE(static_cast<int64_t>(train.images.size()) == counts->train);
  REQUIRE(static_cast<int64_t>(test.images.size()) == counts->test);

  // Every image of the set (all distinct here) appears once across both files, with its label.
  std::map<std::vector<float>, int64_t> expected;
  for (int64_t i = 0; i < 50; ++i) expected[image_of(*set, i)] = set->labels.data<int64_t>()[i];
  REQUIRE(expected.size() == 50);
  std::map<std::vector<float>, int> seen;
  auto check_file = [&](const decoded& d) {
    for (std::size_t i = 0; i < d.images.size(); ++i) {
      auto it = expected.find(d.images[i]);
      REQUIRE(it != expected.end());
      CHECK(it->second == d.labels[i]);
      ++seen[d.images[i]];
    }
  };
  check_file(train);
  check_file(test);
  CHECK(seen.size() == 50);
  for (const auto& [image, times] : seen) CHECK(times == 1);
}

TEST_CASE("the real sklearn digits file gives 1797 images split 1438 train and 359 test", "[cpu][digits]") {
  auto path = digits::find_sklearn_digits_csv();
  if (!path) {
    WARN("python3-sklearn's digits.csv.gz not found; skipping (scripts/setup installs python3-sklearn)");
    return;
  }
  auto set = digits::read_digits_csv(*path);
  REQUIRE(set);
  REQUIRE(set->images.shape() == af::shape{1797, 8, 8, 1});
  std::array<int64_t, 10> per_label{};
  for (int64_t i = 0; i < 1797; ++i) {
    int64_t label = set->labels.data<int64_t>()[i];
    REQUIRE(label >= 0);
    REQUIRE(label <= 9);
    ++per_label[static_cast<std::size_t>(label)];
  }
  for (int64_t n : per_label) {
    CHECK(n >= 170);
    CHECK(n <= 190);
  }
  const float* pixels = set->images.data<float>();
  CHECK(*std::min_element(pixels, pixels + 1797 * 64) == 0.0f);
  CHECK(*std::max_element(pixels, pixels + 1797 * 64) == 1.0f);

  scratch_dir dir{"af_digits_real"};
  auto counts = digits::write_digits_tfrecords(*set, dir.file("out"));
  REQUIRE(counts);
  CHECK(counts->train == 1438);
  CHECK(counts->test == 359);
  decoded train = read_records(dir.file("out/train.tfrecord"));
  decoded test = read_records(dir.file("out/test.tfrecord"));
  CHECK(train.labels.size() == 1438);
  CHECK(test.labels.size() == 359);
}
