// TFRecord reading and Example parsing speed: 32x32x3 uint8 image + int64 label records from an
// uncompressed file in the page cache, against reading the same file with plain read(2) calls into
// the same buffer size (the floor any reader pays), measured in the same run.
//
//   build/bench/bench_records [--quick]

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "bench_common.hpp"
#include "serialization/crc32c.hpp"
#include "serialization/example.hpp"
#include "serialization/feature_spec.hpp"
#include "serialization/tfrecord.hpp"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "bench_records: %s\n", why.c_str());
  std::exit(1);
}

// Records/s of `body` (which returns the records it saw), median of `reps` runs.
template <class F>
double rate(int reps, int64_t records, F&& body) {
  std::vector<double> per_s;
  for (int r = 0; r < reps; ++r) {
    int64_t n = 0;
    const double s = af::bench::seconds_of([&] { n = body(); });
    if (n != records) fail("saw " + std::to_string(n) + " of " + std::to_string(records) + " records");
    per_s.push_back(static_cast<double>(n) / s);
  }
  return af::bench::median(per_s);
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv, "build/bench/bench_records [--quick]", {"--quick"});
  const bool quick = af::bench::has_flag(argc, argv, "--quick");
  const int64_t records = quick ? 50000 : 200000;
  const int reps = quick ? 3 : 5;
  const auto path =
      (std::filesystem::temp_directory_path() / ("af_bench_records_" + std::to_string(::getpid()) + ".tfrecord")).string();
  {
    auto w = af::tfrecord_writer::open(path);
    if (!w) fail(w.error_value().message);
    af::example ex;
    for (int64_t i = 0; i < records; ++i) {
      ex.features["image"] = af::feature::bytes({std::string(32 * 32 * 3, static_cast<char>(i))});
      ex.features["label"] = af::feature::int64s({i % 10});
      if (auto ok = w->write(af::encode_example(ex)); !ok) fail(ok.error_value().message);
    }
    if (auto ok = w->close(); !ok) fail(ok.error_value().message);
  }
  const double file_bytes = static_cast<double>(std::filesystem::file_size(path));
  auto parser = af::example_parser::make(
      {{"image", af::fixed_len(af::dtype::u8, {32, 32, 3})}, {"label", af::fixed_len(af::dtype::i64, {})}});
  if (!parser) fail(parser.error_value().message);

  // The floor: the same bytes through read(2) into a 1 MiB buffer, counted as if records.
  std::vector<char> buffer(std::size_t{1} << 20);
  const double raw_read = rate(reps, records, [&] {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("cannot open " + path);
    while (::read(fd, buffer.data(), buffer.size()) > 0) {
    }
    ::close(fd);
    return records;
  });
  const double read_only = rate(reps, records, [&] {
    auto r = af::tfrecord_reader::open(path);
    int64_t n = 0;
    for (auto v = r->next_view(); v && v->has_value(); v = r->next_view()) ++n;
    return n;
  });
  const double read_parse = rate(reps, records, [&] {
    auto r = af::tfrecord_reader::open(path);
    int64_t n = 0;
    for (auto v = r->next_view(); v && v->has_value(); v = r->next_view()) {
      if (!parser->parse((*v)->data)) fail("parse failed");
      ++n;
    }
    return n;
  });
  const double read_parse_batched = rate(reps, records, [&] {
    auto r = af::tfrecord_reader::open(path);
    std::vector<af::tfrecord_record> batch(256);
    std::vector<std::string_view> views;
    int64_t n = 0;
    for (;;) {
      views.clear();
      for (auto& rec : batch) {
        auto got = r->next(rec);
        if (!got || !*got) break;
        views.push_back(rec.data);
      }
      if (views.empty()) break;
      if (!parser->parse_batch(views)) fail("parse_batch failed");
      n += static_cast<int64_t>(views.size());
    }
    return n;
  });
  std::filesystem::remove(path);

  std::printf("read(2) floor %.0f MB/s; TFRecord read %.0f records/s (%.0f MB/s, CRC %s); read+parse %.0f/s; "
              "batched %.0f/s\n",
              raw_read * file_bytes / static_cast<double>(records) / 1e6, read_only,
              read_only * file_bytes / static_cast<double>(records) / 1e6,
              af::crc32c_is_hardware_accelerated() ? "SSE4.2" : "table", read_parse, read_parse_batched);
  af::bench::json_line out;
  out.add("bench", std::string{"records"});
  out.add("records", static_cast<double>(records));
  out.add("read_records_per_s", read_only);
  out.add("read_parse_records_per_s", read_parse);
  out.add("read_parse_batched_records_per_s", read_parse_batched);
  out.add("raw_read_mb_per_s", raw_read * file_bytes / static_cast<double>(records) / 1e6);
  out.add("read_vs_raw_read", read_only / raw_read);
  out.print();
  return 0;
}
