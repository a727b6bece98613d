#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/scratch_dir.hpp"
#include "serialization/checkpoint.hpp"
#include "serialization/crc32c.hpp"

namespace fs = std::filesystem;
using af::dtype;
using af::errc;
using af::tensor;
using af::testing::scratch_dir;
namespace ckpt = af::ckpt;

namespace {

/// A contiguous tensor of `dims` whose bytes are random (NaN payloads, odd bool bytes and all):
/// only a byte-exact copy survives a round trip.
tensor random_bytes_tensor(const af::shape& dims, dtype type, uint32_t seed) {
  auto t = tensor::empty(dims, type);
  REQUIRE(t.has_value());
  std::mt19937 gen(seed);
  auto* p = static_cast<unsigned char*>(t->raw_data());
  for (std::size_t i = 0; i < t->nbytes(); ++i) p[i] = static_cast<unsigned char>(gen());
  return *t;
}

std::string bytes_of(const tensor& t) {
  auto c = t.contiguous();
  REQUIRE(c.has_value());
  return {static_cast<const char*>(c->raw_data()), c->nbytes()};
}

/// Same dtype, shape and bytes.
void require_identical(const tensor& a, const tensor& b) {
  REQUIRE(a.type() == b.type());
  REQUIRE(af::to_string(a.shape()) == af::to_string(b.shape()));
  REQUIRE(bytes_of(a) == bytes_of(b));
}

ckpt::checkpoint small_checkpoint(float fill) {
  ckpt::checkpoint ck;
  ck.tensors.push_back({"w", tensor::from_vector<float>({fill, fill + 1, fill + 2}, {3})});
  ck.metadata.push_back({"fill", std::to_string(fill)});
  return ck;
}

float first_weight(const ckpt::checkpoint& ck) {
  const tensor* w = ck.find("w");
  REQUIRE(w != nullptr);
  return w->to_vector<float>()[0];
}

void truncate_file(const std::string& path, uint64_t size) { fs::resize_file(path, size); }

/// load() fails with `code` and a message naming `file` (and `also`, when given).
void require_load_error(const std::string& dir, errc code, const std::string& file, const std::string& also = "") {
  auto loaded = ckpt::load(dir);
  REQUIRE_FALSE(loaded.has_value());
  INFO(loaded.error_value().to_string());
  CHECK(loaded.error_value().code == code);
  CHECK(loaded.error_value().message.find(file) != std::string::npos);
  if (!also.empty()) CHECK(loaded.error_value().message.find(also) != std::string::npos);
}

void append_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

/// An index file (format in checkpoint.hpp) describing `copies` tensors named "t" of `type` and
/// `dims`, each at offset 0 with `nbytes` bytes and CRC 0, in a data file of `data_bytes` bytes;
/// its own CRC is right.
std::string index_of_tensor(dtype type, const std::vector<int64_t>& dims, uint64_t nbytes, uint64_t data_bytes,
                            int copies = 1) {
  std::string index = "AFCKIDX1";
  append_le(index, static_cast<uint64_t>(copies), 4);
  append_le(index, data_bytes, 8);
  for (int i = 0; i < copies; ++i) {
    append_le(index, 1, 4);
    index += 't';
    index += static_cast<char>(type);
    index += static_cast<char>(dims.size());
    for (int64_t d : dims) append_le(index, static_cast<uint64_t>(d), 8);
    append_le(index, 0, 8);
    append_le(index, nbytes, 8);
    append_le(index, 0, 4);
  }
  append_le(index, af::crc32c(index.data(), index.size()), 4);
  return index;
}

std::vector<std::string> entries_of(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("a checkpoint of every dtype, an empty tensor, a scalar and a view round-trips bit-exactly", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  ckpt::checkpoint ck;
  uint32_t seed = 1;
  for (dtype type : {dtype::f32, dtype::f64, dtype::f16, dtype::bf16, dtype::i8, dtype::u8, dtype::i32, dtype::i64,
                     dtype::boolean})
    ck.tensors.push_back({std::string{"random_"} + std::string{af::to_string(type)},
                          random_bytes_tensor({3, 5, 2}, type, seed++)});
  ck.tensors.push_back({"empty", random_bytes_tensor({0, 4}, dtype::f32, 0)});
  ck.tensors.push_back({"scalar", tensor::scalar<double>(-2.5)});
  ck.tensors.push_back({"big_i64", tensor::from_vector<int64_t>({std::numeric_limits<int64_t>::min(), (int64_t{1} << 53) + 1}, {2})});
  ck.tensors.push_back({"six_dims", random_bytes_tensor({1, 2, 1, 3, 1, 2}, dtype::f32, 99)});
  auto matrix = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto transposed = matrix.transpose();
  REQUIRE(transposed.has_value());
  REQUIRE_FALSE(transposed->is_contiguous());
  ck.tensors.push_back({"transposed", *transposed});
  ck.metadata = {{"step", "1200"},
                 {"iterator", "line one\nline two\r\n\ttabbed"},
                 {"binary", std::string("\0\x01\xff\n\0", 5)},
                 {"", ""}};

  const std::string path = dir.file("model");
  REQUIRE(ckpt::save(path, ck).has_value());
  CHECK(entries_of(dir.path) == std::vector<std::string>{"model"});  // the temporary is gone
  auto loaded = ckpt::load(path);
  REQUIRE(loaded.has_value());

  REQUIRE(loaded->tensors.size() == ck.tensors.size());
  for (std::size_t i = 0; i < ck.tensors.size(); ++i) {
    INFO(ck.tensors[i].name);
    CHECK(loaded->tensors[i].name == ck.tensors[i].name);
    require_identical(loaded->tensors[i].value, ck.tensors[i].value);
  }
  CHECK(loaded->find("scalar")->ndim() == 0);
  CHECK(loaded->find("scalar")->item<double>() == -2.5);
  CHECK(loaded->find("empty")->numel() == 0);
  CHECK(loaded->find("big_i64")->to_vector<int64_t>() ==
        std::vector<int64_t>{std::numeric_limits<int64_t>::min(), (int64_t{1} << 53) + 1});
  CHECK(loaded->find("transposed")->to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(loaded->find("missing") == nullptr);

  CHECK(loaded->metadata == ck.metadata);
  REQUIRE(loaded->meta("iterator") != nullptr);
  CHECK(*loaded->meta("iterator") == "line one\nline two\r\n\ttabbed");
  CHECK(*loaded->meta("binary") == std::string("\0\x01\xff\n\0", 5));
  CHECK(loaded->meta("nope") == nullptr);
}

TEST_CASE("an empty checkpoint round-trips", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  REQUIRE(ckpt::save(dir.file("empty"), {}).has_value());
  auto loaded = ckpt::load(dir.file("empty"));
  REQUIRE(loaded.has_value());
  CHECK(loaded->tensors.empty());
  CHECK(loaded->metadata.empty());
}

TEST_CASE("save rejects an undefined tensor and a repeated name and leaves nothing behind", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  ckpt::checkpoint undefined;
  undefined.tensors.push_back({"u", tensor{}});
  auto r = ckpt::save(dir.file("a"), undefined);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error_value().code == errc::invalid_argument);
  CHECK(r.error_value().message.find("'u'") != std::string::npos);

  ckpt::checkpoint twice = small_checkpoint(1);
  twice.tensors.push_back(twice.tensors[0]);
  r = ckpt::save(dir.file("a"), twice);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error_value().code == errc::invalid_argument);
  CHECK(entries_of(dir.path).empty());
}

TEST_CASE("saving over an existing checkpoint replaces it and leaves no sibling directories", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  const std::string path = dir.file("run") + "/model";  // the parent is created too
  REQUIRE(ckpt::save(path, small_checkpoint(1)).has_value());
  REQUIRE(ckpt::save(path, small_checkpoint(7)).has_value());
  auto loaded = ckpt::load(path);
  REQUIRE(loaded.has_value());
  CHECK(first_weight(*loaded) == 7.0f);
  CHECK(*loaded->meta("fill") == std::to_string(7.0f));
  CHECK(entries_of(dir.path / "run") == std::vector<std::string>{"model"});
  // A trailing slash names the same checkpoint, not a child of it.
  REQUIRE(ckpt::save(path + "/", small_checkpoint(9)).has_value());
  CHECK(first_weight(*ckpt::load(path)) == 9.0f);
  CHECK(entries_of(dir.path / "run") == std::vector<std::string>{"model"});
}

TEST_CASE("a stale temporary directory is ignored by load and latest and removed by the next save", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  REQUIRE(ckpt::save_numbered(dir.path.string(), 5, small_checkpoint(5)).has_value());
  // What a writer killed half-way leaves: a temporary of a newer step, one beside the current step,
  // both with garbage (a pid that cannot exist, so no live process owns them).
  for (const char* stale : {"ckpt-6.tmp-2000000000-0", "ckpt-5.tmp-2000000000-1"}) {
    fs::create_directories(dir.path / stale);
    std::ofstream(dir.path / stale / "index") << "garbage";
  }
  auto newest = ckpt::latest(dir.path.string());
  REQUIRE(newest.has_value());
  REQUIRE(newest->has_value());
  CHECK(**newest == dir.file("ckpt-5"));
  auto loaded = ckpt::load(**newest);
  REQUIRE(loaded.has_value());
  CHECK(first_weight(*loaded) == 5.0f);

  REQUIRE(ckpt::save(dir.file("ckpt-5"), small_checkpoint(50)).has_value());
  CHECK_FALSE(fs::exists(dir.path / "ckpt-5.tmp-2000000000-1"));  // this checkpoint's leftovers go
  CHECK(first_weight(*ckpt::load(dir.file("ckpt-5"))) == 50.0f);
}

TEST_CASE("load reads the previous checkpoint left as .old when a replacement stopped between renames", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  REQUIRE(ckpt::save(dir.file("ckpt-3"), small_checkpoint(3)).has_value());
  // The fallback replacement renames the checkpoint away before renaming the new one in.
  fs::rename(dir.path / "ckpt-3", dir.path / "ckpt-3.old-2000000000-4");
  auto loaded = ckpt::load(dir.file("ckpt-3"));
  REQUIRE(loaded.has_value());
  CHECK(first_weight(*loaded) == 3.0f);
  auto newest = ckpt::latest(dir.path.string());
  REQUIRE(newest.has_value());
  REQUIRE(newest->has_value());
  CHECK(**newest == dir.file("ckpt-3"));

  REQUIRE(ckpt::save(dir.file("ckpt-3"), small_checkpoint(4)).has_value());
  CHECK(first_weight(*ckpt::load(dir.file("ckpt-3"))) == 4.0f);
  CHECK(entries_of(dir.path) == std::vector<std::string>{"ckpt-3"});
}

TEST_CASE("save_numbered keeps only the newest keep_last checkpoints", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  const std::string base = dir.file("series");
  for (int64_t step : {1, 2, 9, 10, 11}) {
    auto written = ckpt::save_numbered(base, step, small_checkpoint(static_cast<float>(step)), 3);
    REQUIRE(written.has_value());
    CHECK(*written == base + "/ckpt-" + std::to_string(step));
  }
  CHECK(entries_of(base) == std::vector<std::string>{"ckpt-10", "ckpt-11", "ckpt-9"});

  for (int64_t step : {12, 13}) REQUIRE(ckpt::save_numbered(base, step, small_checkpoint(0), 0).has_value());
  CHECK(entries_of(base).size() == 5);  // keep_last 0 keeps all
  REQUIRE(ckpt::save_numbered(base, 14, small_checkpoint(0), 1).has_value());
  CHECK(entries_of(base) == std::vector<std::string>{"ckpt-14"});

  auto negative = ckpt::save_numbered(base, -1, small_checkpoint(0));
  REQUIRE_FALSE(negative.has_value());
  CHECK(negative.error_value().code == errc::invalid_argument);
}

TEST_CASE("latest compares steps as numbers and skips what is not a complete checkpoint", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  const std::string base = dir.path.string();
  auto none = ckpt::latest(base);
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());
  auto missing = ckpt::latest(dir.file("does-not-exist"));
  REQUIRE(missing.has_value());
  CHECK_FALSE(missing->has_value());

  for (int64_t step : {9, 10, 2, 99}) REQUIRE(ckpt::save_numbered(base, step, small_checkpoint(float(step)), 0).has_value());
  fs::create_directories(dir.path / "ckpt-100");  // empty: a directory someone made by hand
  fs::create_directories(dir.path / "ckpt-abc");
  fs::create_directories(dir.path / "ckpt-200.tmp-1-1");
  std::ofstream(dir.path / "ckpt-300") << "a file, not a directory";
  auto newest = ckpt::latest(base);
  REQUIRE(newest.has_value());
  REQUIRE(newest->has_value());
  CHECK(**newest == dir.file("ckpt-99"));
  fs::remove_all(dir.path / "ckpt-99");
  CHECK(**ckpt::latest(base) == dir.file("ckpt-10"));
}

TEST_CASE("a truncated, flipped or missing checkpoint file is an error naming the file", "[cpu][checkpoint]") {
  scratch_dir dir{"af_ckpt"};
  const std::string path = dir.file("model");
  ckpt::checkpoint ck;
  ck.tensors.push_back({"weights", random_bytes_tensor({16, 4}, dtype::f32, 3)});
  ck.tensors.push_back({"bias", random_bytes_tensor({4}, dtype::f64, 4)});
  ck.metadata = {{"step", "7"}, {"iterator", "a\nb"}};
  const std::string data = path + "/data", index = path + "/index", metadata = path + "/metadata";

  SECTION("truncated data") {
    REQUIRE(ckpt::save(path, ck).has_value());
    truncate_file(data, fs::file_size(data) - 1);
    require_load_error(path, errc::malformed_input, data, "truncated");
  }
  SECTION("a flipped byte in each tensor's data") {
    REQUIRE(ckpt::save(path, ck).has_value());
    af::testing::flip_byte(data, 5);
    require_load_error(path, errc::malformed_input, data, "tensor 'weights': digest mismatch");
    REQUIRE(ckpt::save(path, ck).has_value());
    af::testing::flip_byte(data, fs::file_size(data) - 1);
    require_load_error(path, errc::malformed_input, data, "tensor 'bias': digest mismatch");
  }
  SECTION("a deleted index, data or metadata file") {
    for (const std::string& file : {index, data, metadata}) {
      REQUIRE(ckpt::save(path, ck).has_value());
      fs::remove(file);
      require_load_error(path, errc::io_error, file);
    }
  }
  SECTION("a missing directory") { require_load_error(dir.file("nothing"), errc::io_error, dir.file("nothing")); }
  SECTION("a file that is not an index") {
    REQUIRE(ckpt::save(path, ck).has_value());
    std::ofstream(index, std::ios::trunc) << "this is not a checkpoint index at all";
    require_load_error(path, errc::malformed_input, index, "bad header");
  }
  SECTION("every truncation and every flipped byte of the index and metadata") {
    // Never a crash, always an error naming the damaged file.
    for (const std::string& file : {index, metadata}) {
      REQUIRE(ckpt::save(path, ck).has_value());
      const uint64_t size = fs::file_size(file);
      for (uint64_t n = 0; n < size; ++n) {
        REQUIRE(ckpt::save(path, ck).has_value());
        truncate_file(file, n);
        require_load_error(path, errc::malformed_input, file);
      }
      for (uint64_t at = 0; at < size; ++at) {
        REQUIRE(ckpt::save(path, ck).has_value());
        af::testing::flip_byte(file, at);
        require_load_error(path, errc::malformed_input, file);
      }
    }
  }
}

TEST_CASE("an index entry whose shape needs 2^64 bytes or more is an error, not a tensor without storage", "[cpu][checkpoint]") {
  // Found while writing fuzz_checkpoint (its checks on loaded tensors): the byte size of [2^61]
  // f64 (and [2^31, 2^31] f32) wrapped around to 0, matched the entry's 0 bytes, and load()
  // returned a tensor of 2^61 elements over no storage at all.
  scratch_dir dir{"af_ckpt"};
  const std::string path = dir.file("model");
  const std::string index = path + "/index";
  for (const auto& [type, dims] : {std::pair{dtype::f64, std::vector<int64_t>{int64_t{1} << 61}},
                                   std::pair{dtype::f32, std::vector<int64_t>{int64_t{1} << 31, int64_t{1} << 31}},
                                   std::pair{dtype::u8, std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32, 0}}}) {
    REQUIRE(ckpt::save(path, ckpt::checkpoint{}).has_value());  // an empty data file, valid metadata
    std::ofstream(index, std::ios::binary | std::ios::trunc) << index_of_tensor(type, dims, 0, 0);
    require_load_error(path, errc::malformed_input, index, "tensor 't' (entry 0): shape " + af::to_string(dims) + " of " +
                                                              std::string(af::to_string(type)) + " is too large");
  }
}

TEST_CASE("an index naming a tensor twice is an error naming both entries", "[cpu][checkpoint]") {
  // Found while writing fuzz_checkpoint (a loaded checkpoint must save again): load() accepted
  // it, find() saw only the first tensor, and saving the loaded checkpoint failed on the name.
  scratch_dir dir{"af_ckpt"};
  const std::string path = dir.file("model");
  REQUIRE(ckpt::save(path, ckpt::checkpoint{}).has_value());
  std::ofstream(path + "/index", std::ios::binary | std::ios::trunc) << index_of_tensor(dtype::u8, {0}, 0, 0, 2);
  require_load_error(path, errc::malformed_input, path + "/index", "tensor 't' (entry 1): the name of entry 0 again");
}
