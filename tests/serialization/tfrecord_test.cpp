#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <zlib.h>

#include "serialization/crc32c.hpp"
#include "serialization/tfrecord.hpp"

using af::errc;
using af::record_compression;
using af::tfrecord_reader;
using af::tfrecord_writer;

namespace {

// A fresh directory per test case, removed afterwards.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("af_tfrecord_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string random_bytes(std::size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen());
  return s;
}

void write_records(const std::string& path, record_compression c, const std::vector<std::string>& records) {
  auto w = tfrecord_writer::open(path, c);
  REQUIRE(w.has_value());
  for (const auto& r : records) REQUIRE(w->write(r).has_value());
  REQUIRE(w->close().has_value());
}

// Reads until the end or an error; returns the payloads and the error (code none at a clean end).
struct read_result {
  std::vector<af::tfrecord_record> records;
  af::error err;
};
read_result read_all(const std::string& path, af::tfrecord_reader_options opts = {}) {
  read_result out;
  auto r = tfrecord_reader::open(path, opts);
  REQUIRE(r.has_value());
  for (;;) {
    auto rec = r->next();
    if (!rec) {
      out.err = rec.error_value();
      break;
    }
    if (!*rec) break;
    out.records.push_back(std::move(**rec));
  }
  return out;
}

// The whole stream compressed independently of our writer (zlib comes with af_serialization).
std::string compress(const std::string& plain, record_compression c) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, c == record_compression::gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, plain.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = static_cast<uInt>(plain.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("crc32c matches the published Castagnoli test vectors", "[cpu]") {
  const std::string digits = "123456789";
  CHECK(af::crc32c(digits.data(), digits.size()) == 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<unsigned char>(i);
    down[i] = static_cast<unsigned char>(31 - i);
  }
  CHECK(af::crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(af::crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(af::crc32c(up.data(), 32) == 0x46DD794Eu);
  CHECK(af::crc32c(down.data(), 32) == 0x113FDB5Cu);
  CHECK(af::crc32c(nullptr, 0) == 0u);
  CHECK(af::crc32c_portable(digits.data(), digits.size()) == 0xE3069283u);
  CHECK(af::crc32c_portable(zeros.data(), 32) == 0x8A9136AAu);
}

TEST_CASE("crc32c extends over concatenated pieces and the table path agrees with the fast path", "[cpu]") {
  const std::string data = random_bytes(4099, 7);
  const uint32_t whole = af::crc32c(data.data(), data.size());
  for (std::size_t cut : {0, 1, 7, 8, 9, 100, 4098, 4099}) {
    uint32_t first = af::crc32c(data.data(), cut);
    CHECK(af::crc32c(data.data() + cut, data.size() - cut, first) == whole);
  }
  // Every length 0..64 at every alignment 0..7, so both loops' tails are exercised.
  for (std::size_t start = 0; start < 8; ++start)
    for (std::size_t n = 0; n <= 64; ++n)
      REQUIRE(af::crc32c(data.data() + start, n) == af::crc32c_portable(data.data() + start, n));
  CHECK(af::crc32c_portable(data.data(), data.size()) == whole);
  // Around the fast path's three-block (768-byte) interleave boundaries.
  for (std::size_t n : {767, 768, 769, 1535, 1536, 1543, 2311, 3200, 4096})
    REQUIRE(af::crc32c(data.data() + 3, n, 0x1234u) == af::crc32c_portable(data.data() + 3, n, 0x1234u));
}

TEST_CASE("masked crc32c follows TensorFlow's rotate-and-add formula", "[cpu]") {
  // By hand: 0xE3069283 >> 15 = 0x0001C60D; 0xE3069283 << 17 = 0x25060000 (mod 2^32);
  // (0x2507C60D + 0xA282EAD8) mod 2^32 = 0xC78AB0E5.
  CHECK(af::mask_crc32c(0xE3069283u) == 0xC78AB0E5u);
  CHECK(af::mask_crc32c(0x8A9136AAu) == 0x0FD7FFFAu);
  CHECK(af::mask_crc32c(0u) == 0xA282EAD8u);
  CHECK(af::unmask_crc32c(0xC78AB0E5u) == 0xE3069283u);
  const std::string digits = "123456789";
  CHECK(af::masked_crc32c(digits.data(), digits.size()) == 0xC78AB0E5u);
  for (uint32_t v : {0u, 1u, 0xffffffffu, 0x12345678u, 0x80000000u}) CHECK(af::unmask_crc32c(af::mask_crc32c(v)) == v);
}

TEST_CASE("a record is framed byte for byte as TensorFlow frames it", "[cpu]") {
  // length 5 (LE u64), masked CRC of those 8 bytes, "hello", masked CRC of "hello".
  const std::string expected = from_hex("0500000000000000" "eab2043e" "68656c6c6f" "bb1f1c19");
  std::string framed;
  af::append_tfrecord(framed, "hello");
  CHECK(framed == expected);

  temp_dir dir;
  auto path = dir.file("hello.tfrecord");
  write_records(path, record_compression::none, {"hello"});
  CHECK(read_file(path) == expected);
  write_file(path, expected + expected);
  auto got = read_all(path);
  CHECK_FALSE(got.err);
  REQUIRE(got.records.size() == 2);
  CHECK(got.records[1].data == "hello");
  CHECK(got.records[1].index == 1);
  CHECK(got.records[1].offset == expected.size());
}

TEST_CASE("records round-trip through none, gzip and zlib files, empty and 10 MB ones included", "[cpu]") {
  std::vector<std::string> records = {"", "a", std::string(1000, 'x'), "", random_bytes(10 << 20, 1),
                                      random_bytes(3000, 2), ""};
  for (int i = 0; i < 500; ++i) records.push_back(random_bytes(static_cast<std::size_t>(i * 7 % 333), 100 + i));
  temp_dir dir;
  for (auto c : {record_compression::none, record_compression::gzip, record_compression::zlib}) {
    DYNAMIC_SECTION("compression " << af::to_string(c)) {
      auto path = dir.file(std::string("round.") + std::string(af::to_string(c)));
      write_records(path, c, records);
      for (std::size_t buffer : {std::size_t{1} << 20, std::size_t{4096}}) {
        af::tfrecord_reader_options opts;
        opts.compression = c;
        opts.buffer_bytes = buffer;
        auto got = read_all(path, opts);
        INFO(got.err.to_string());
        REQUIRE_FALSE(got.err);
        REQUIRE(got.records.size() == records.size());
        uint64_t offset = 0;
        for (std::size_t i = 0; i < records.size(); ++i) {
          REQUIRE(got.records[i].data == records[i]);
          CHECK(got.records[i].index == i);
          CHECK(got.records[i].offset == offset);
          offset += records[i].size() + 16;
        }
      }
      const std::string head = read_file(path).substr(0, 2);
      if (c == record_compression::gzip) CHECK(head == "\x1f\x8b");  // gzip magic
      if (c == record_compression::zlib) CHECK(head[0] == '\x78');     // zlib header, 32 KiB window
    }
  }
}

TEST_CASE("compression is parsed by name and guessed from the file extension", "[cpu]") {
  CHECK(*af::parse_record_compression("GZIP") == record_compression::gzip);
  CHECK(*af::parse_record_compression("zlib") == record_compression::zlib);
  CHECK(*af::parse_record_compression("") == record_compression::none);
  auto bad = af::parse_record_compression("lz4");
  REQUIRE_FALSE(bad.has_value());
  CHECK(contains(bad.error_value().message, "lz4"));
  CHECK(af::compression_from_path("a/train.tfrecord.gz") == record_compression::gzip);
  CHECK(af::compression_from_path("x.zz") == record_compression::zlib);
  CHECK(af::compression_from_path("x.zlib") == record_compression::zlib);
  CHECK(af::compression_from_path("x.tfrecord") == record_compression::none);
}

TEST_CASE("an empty file holds no records, compressed or not", "[cpu]") {
  temp_dir dir;
  for (auto c : {record_compression::none, record_compression::gzip, record_compression::zlib}) {
    auto written = dir.file("empty_written");
    write_records(written, c, {});
    CHECK(read_all(written, {c}).records.empty());
    CHECK_FALSE(read_all(written, {c}).err);
    auto zero = dir.file("zero_bytes");
    write_file(zero, "");
    CHECK(read_all(zero, {c}).records.empty());
    CHECK_FALSE(read_all(zero, {c}).err);
  }
}

namespace {

std::string record_name(int i) {
  std::string name = "r";  // (not "r" + to_string: GCC 12 gives a false -Wrestrict there)
  name += std::to_string(i);
  return name;
}

// Three records "r0", "r1", "r2" then the damaged one (index 3) at offset 3 * 18 = 54.
std::string good_prefix() {
  std::string out;
  for (int i = 0; i < 3; ++i) af::append_tfrecord(out, record_name(i));
  return out;
}

void check_damage(const std::string& bytes, const std::string& expected_text) {
  temp_dir dir;
  auto path = dir.file("bad.tfrecord");
  write_file(path, bytes);
  auto got = read_all(path);
  REQUIRE(got.records.size() == 3);  // everything before the damage comes back intact
  for (int i = 0; i < 3; ++i) CHECK(got.records[i].data == record_name(i));
  REQUIRE(got.err);
  INFO(got.err.message);
  CHECK(got.err.code == errc::malformed_input);
  CHECK(contains(got.err.message, path));
  CHECK(contains(got.err.message, "record 3"));
  CHECK(contains(got.err.message, "offset 54"));
  CHECK(contains(got.err.message, expected_text));

  // The reader stays in the error: no hang, no crash, no records after it.
  auto r = tfrecord_reader::open(path);
  REQUIRE(r.has_value());
  for (int i = 0; i < 3; ++i) REQUIRE(r->next().has_value());
  for (int i = 0; i < 3; ++i) {
    auto again = r->next();
    REQUIRE_FALSE(again.has_value());
    CHECK(again.error_value().message == got.err.message);
  }
}

}  // namespace

TEST_CASE("a flipped bit in the length CRC is reported with the record index and offset", "[cpu]") {
  std::string bad;
  af::append_tfrecord(bad, "payload");
  bad[9] ^= 0x10;
  check_damage(good_prefix() + bad, "wrong length CRC");
}

TEST_CASE("a flipped bit in the length itself fails the length CRC", "[cpu]") {
  std::string bad;
  af::append_tfrecord(bad, "payload");
  bad[0] ^= 0x01;
  check_damage(good_prefix() + bad, "wrong length CRC");
}

TEST_CASE("a flipped bit in the data or its CRC is a wrong data CRC", "[cpu]") {
  std::string bad;
  af::append_tfrecord(bad, "payload");
  std::string data_flip = bad, crc_flip = bad;
  data_flip[14] ^= 0x04;
  crc_flip[crc_flip.size() - 1] ^= 0x80;
  check_damage(good_prefix() + data_flip, "wrong data CRC");
  check_damage(good_prefix() + crc_flip, "wrong data CRC");
}

TEST_CASE("verify_crc=false skips data CRCs but still checks lengths", "[cpu]") {
  std::string bad;
  af::append_tfrecord(bad, "payload");
  bad[14] ^= 0x04;
  temp_dir dir;
  auto path = dir.file("nocrc.tfrecord");
  write_file(path, good_prefix() + bad);
  af::tfrecord_reader_options opts;
  opts.verify_crc = false;
  auto got = read_all(path, opts);
  CHECK_FALSE(got.err);
  CHECK(got.records.size() == 4);
}

TEST_CASE("a file cut inside a header or inside the data is truncated, with what was needed", "[cpu]") {
  std::string next;
  af::append_tfrecord(next, std::string(100, 'd'));  // 116 bytes in all
  check_damage(good_prefix() + next.substr(0, 5),
               "truncated: file ends inside record 3 (needs 12 bytes at offset 54, has 5)");
  check_damage(good_prefix() + next.substr(0, 50),
               "truncated: file ends inside record 3 (needs 116 bytes at offset 54, has 50)");
  check_damage(good_prefix() + next.substr(0, 114),
               "truncated: file ends inside record 3 (needs 116 bytes at offset 54, has 114)");
}

TEST_CASE("an absurd length with a valid CRC is rejected before any allocation", "[cpu]") {
  std::string header(12, '\0');
  const uint64_t huge = uint64_t{1} << 40;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(huge >> (8 * i));
  const uint32_t crc = af::masked_crc32c(header.data(), 8);
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>(crc >> (8 * i));
  check_damage(good_prefix() + header + "some bytes", "larger than the whole file");

  // Compressed, the length cannot be checked up front: the reader grows its buffer only as data
  // arrives (here 5000 bytes, not 1 TiB), then reports the truncation.
  temp_dir dir;
  auto path = dir.file("absurd.gz");
  write_file(path, compress(good_prefix() + header + std::string(5000, 'z'), record_compression::gzip));
  auto got = read_all(path, {record_compression::gzip});
  CHECK(got.records.size() == 3);
  REQUIRE(got.err);
  CHECK(contains(got.err.message, "truncated: file ends inside record 3 (needs 1099511627792 bytes at offset 54, has 5012)"));
}

TEST_CASE("a truncated or corrupted gzip stream names the record and offset after the intact ones", "[cpu]") {
  std::string plain = good_prefix();
  std::string tail;
  af::append_tfrecord(tail, random_bytes(20000, 9));  // incompressible, so a cut lands inside it
  plain += tail;
  temp_dir dir;
  for (auto c : {record_compression::gzip, record_compression::zlib}) {
    std::string packed = compress(plain, c);
    auto path = dir.file("cut");
    write_file(path, packed.substr(0, packed.size() - 3000));
    auto got = read_all(path, {c});
    REQUIRE(got.records.size() == 3);
    REQUIRE(got.err);
    INFO(got.err.message);
    CHECK(got.err.code == errc::malformed_input);
    CHECK(contains(got.err.message, "record 3 at offset 54"));
    CHECK(contains(got.err.message, "stream is truncated"));

    // A cut exactly at a record boundary of the plain stream is still a truncated stream.
    std::string first = compress(good_prefix(), c);
    write_file(path, first.substr(0, first.size() - 4));  // drop the gzip/zlib trailer only
    auto boundary = read_all(path, {c});
    REQUIRE(boundary.err);
    CHECK(contains(boundary.err.message, "stream is truncated"));

    std::string garbled = packed;
    for (std::size_t i = packed.size() / 2; i < packed.size() / 2 + 64; ++i) garbled[i] = static_cast<char>(~garbled[i]);
    write_file(path, garbled);
    auto bad = read_all(path, {c});
    REQUIRE(bad.err);
    CHECK(bad.err.code == errc::malformed_input);
    CHECK(contains(bad.err.message, path));
    CHECK(contains(bad.err.message, "record 3 at offset 54"));
  }
  // Reading plain bytes as gzip says what is wrong with the stream.
  auto path = dir.file("plain_as_gzip");
  write_file(path, plain);
  auto wrong = read_all(path, {record_compression::gzip});
  REQUIRE(wrong.err);
  CHECK(contains(wrong.err.message, "gzip stream error"));
  CHECK(contains(wrong.err.message, "record 0 at offset 0"));
}

TEST_CASE("a reader reopened at a saved position continues with the next record", "[cpu]") {
  std::vector<std::string> records;
  for (int i = 0; i < 50; ++i) records.push_back(random_bytes(static_cast<std::size_t>(10 + i * 37), 300 + i));
  temp_dir dir;
  for (auto c : {record_compression::none, record_compression::gzip, record_compression::zlib}) {
    auto path = dir.file("resume");
    write_records(path, c, records);
    auto r = tfrecord_reader::open(path, {c});
    REQUIRE(r.has_value());
    CHECK(r->position() == af::tfrecord_position{0, 0});
    for (int i = 0; i < 17; ++i) REQUIRE(r->next().has_value());
    af::tfrecord_position saved = r->position();
    CHECK(saved.index == 17);
    auto expected_next = r->next();
    REQUIRE(expected_next.has_value());
    REQUIRE(expected_next->has_value());

    auto resumed = tfrecord_reader::open_at(path, saved, {c});
    REQUIRE(resumed.has_value());
    CHECK(resumed->position() == saved);
    for (std::size_t i = 17; i < records.size(); ++i) {
      auto rec = resumed->next();
      REQUIRE(rec.has_value());
      REQUIRE(rec->has_value());
      CHECK((*rec)->data == records[i]);
      CHECK((*rec)->index == i);
    }
    auto end = resumed->next();
    REQUIRE(end.has_value());
    CHECK_FALSE(end->has_value());

    auto past = tfrecord_reader::open_at(path, {999, uint64_t{1} << 30}, {c});
    REQUIRE_FALSE(past.has_value());
    CHECK(past.error_value().code == errc::out_of_range);
  }
}

TEST_CASE("next_view and next(record&) hand out the same records without reallocating", "[cpu]") {
  temp_dir dir;
  auto path = dir.file("views");
  std::vector<std::string> records;
  for (int i = 0; i < 100; ++i) records.push_back(std::string(500, static_cast<char>('a' + i % 26)));
  write_records(path, record_compression::none, records);
  auto r = tfrecord_reader::open(path);
  REQUIRE(r.has_value());
  for (int i = 0; i < 50; ++i) {
    auto v = r->next_view();
    REQUIRE(v.has_value());
    REQUIRE(v->has_value());
    CHECK((*v)->data == records[i]);
    CHECK((*v)->index == static_cast<uint64_t>(i));
  }
  af::tfrecord_record rec;
  REQUIRE(*r->next(rec));
  const char* storage = rec.data.data();
  for (int i = 51; i < 100; ++i) {
    REQUIRE(*r->next(rec));
    CHECK(rec.data == records[i]);
  }
  CHECK(rec.data.data() == storage);  // same capacity reused for equal-sized records
  CHECK_FALSE(*r->next(rec));
}

TEST_CASE("a flushed writer's records are readable before close, compressed or not", "[cpu]") {
  temp_dir dir;
  for (auto c : {record_compression::none, record_compression::gzip}) {
    auto path = dir.file("flushed");
    auto w = tfrecord_writer::open(path, c);
    REQUIRE(w.has_value());
    REQUIRE(w->write("one").has_value());
    REQUIRE(w->write("two").has_value());
    REQUIRE(w->flush().has_value());
    CHECK(w->records_written() == 2);
    af::tfrecord_reader_options opts{c};
    auto r = tfrecord_reader::open(path, opts);
    REQUIRE(r.has_value());
    auto first = r->next();
    REQUIRE(first.has_value());
    REQUIRE(first->has_value());
    CHECK((*first)->data == "one");
    auto second = r->next();
    REQUIRE(second.has_value());
    REQUIRE(second->has_value());
    CHECK((*second)->data == "two");
    REQUIRE(w->close().has_value());
    CHECK(w->close().has_value());  // idempotent
    auto late = w->write("three");
    REQUIRE_FALSE(late.has_value());
    CHECK(contains(late.error_value().message, "after close"));
  }
}

TEST_CASE("opening a missing file or an unwritable path names the path", "[cpu]") {
  auto r = tfrecord_reader::open("/nonexistent/dir/x.tfrecord");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error_value().code == errc::io_error);
  CHECK(contains(r.error_value().message, "/nonexistent/dir/x.tfrecord"));
  auto w = tfrecord_writer::open("/nonexistent/dir/y.tfrecord");
  REQUIRE_FALSE(w.has_value());
  CHECK(w.error_value().code == errc::io_error);
  CHECK(contains(w.error_value().message, "/nonexistent/dir/y.tfrecord"));
}
