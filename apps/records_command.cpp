// `actorflow records cat|verify|count FILE...`: looks into TFRecord files.
//   cat     one JSON line per record: the tf.train.Example's features (bytes base64, floats in
//           shortest round-trip form, int64 as JSON numbers); --raw prints base64 payloads instead
//   verify  checks every length and data CRC; names the first bad record, else one summary line
//   count   records per file and in total
// Compression comes from the extension (.gz, .zz/.zlib) unless --compression gzip|zlib|none says.

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/commands.hpp"
#include "apps/json_text.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

namespace af::apps {

namespace {

int records_usage(FILE* out) {
  std::fprintf(out,
               "usage: actorflow records cat [--raw] [--compression gzip|zlib|none] FILE...\n"
               "       actorflow records verify [--compression gzip|zlib|none] FILE...\n"
               "       actorflow records count [--compression gzip|zlib|none] FILE...\n"
               "Compression defaults to the file extension: .gz gzip, .zz/.zlib zlib, else none.\n");
  return out == stderr ? 2 : 0;
}

// JSON has no NaN or infinity: print them as protobuf's JSON mapping does, as strings.
void append_float(std::string& out, float v) {
  if (std::isnan(v)) {
    out += "\"NaN\"";
  } else if (std::isinf(v)) {
    out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  } else {
    char text[32];
    auto r = std::to_chars(text, text + sizeof text, v);  // shortest text that reads back exactly
    out.append(text, r.ptr);
  }
}

void append_example_json(std::string& out, const example& ex) {
  out += '{';
  bool first = true;
  for (const auto& [name, f] : ex.features) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, name);
    out += ':';
    switch (f.kind()) {
      case feature_kind::none: out += "{}"; break;
      case feature_kind::bytes_list: {
        out += "{\"bytes_list\":[";
        const auto& values = std::get<std::vector<std::string>>(f.values);
        for (std::size_t i = 0; i < values.size(); ++i) {
          if (i) out += ',';
          out += '"';
          append_base64(out, values[i]);
          out += '"';
        }
        out += "]}";
        break;
      }
      case feature_kind::float_list: {
        out += "{\"float_list\":[";
        const auto& values = std::get<std::vector<float>>(f.values);
        for (std::size_t i = 0; i < values.size(); ++i) {
          if (i) out += ',';
          append_float(out, values[i]);
        }
        out += "]}";
        break;
      }
      case feature_kind::int64_list: {
        out += "{\"int64_list\":[";
        const auto& values = std::get<std::vector<int64_t>>(f.values);
        for (std::size_t i = 0; i < values.size(); ++i) {
          if (i) out += ',';
          out += std::to_string(values[i]);
        }
        out += "]}";
        break;
      }
    }
  }
  out += '}';
}

struct records_args {
  std::string action;
  std::optional<record_compression> compression;
  bool raw = false;
  std::vector<std::string> files;
};

// Visits every record of every file; stops at the first error, which it prints. visit(file,
// record) returns false to stop with a failure it has printed itself.
template <class Visit>
bool for_each_record(const records_args& args, bool verify_crc, Visit&& visit) {
  for (const auto& file : args.files) {
    tfrecord_reader_options opts;
    opts.compression = args.compression.value_or(compression_from_path(file));
    opts.verify_crc = verify_crc;
    auto reader = tfrecord_reader::open(file, opts);
    if (!reader) {
      std::fprintf(stderr, "actorflow records: %s\n", reader.error_value().to_string().c_str());
      return false;
    }
    for (;;) {
      auto rec = reader->next_view();
      if (!rec) {
        std::fprintf(stderr, "actorflow records: %s\n", rec.error_value().to_string().c_str());
        return false;
      }
      if (!*rec) break;
      if (!visit(file, **rec)) return false;
    }
  }
  return true;
}

int run_cat(const records_args& args) {
  std::string out;
  auto flush = [&] {
    std::fwrite(out.data(), 1, out.size(), stdout);
    out.clear();
  };
  bool ok = for_each_record(args, true, [&](const std::string& file, const tfrecord_record_view& rec) {
    if (args.raw) {
      append_base64(out, rec.data);
    } else {
      auto ex = decode_example(rec.data);
      if (!ex) {
        flush();
        std::fprintf(stderr,
                     "actorflow records: %s: record %llu at offset %llu is not a tf.train.Example (%s); "
                     "use --raw to print payloads\n",
                     file.c_str(), static_cast<unsigned long long>(rec.index),
                     static_cast<unsigned long long>(rec.offset), ex.error_value().message.c_str());
        return false;
      }
      append_example_json(out, *ex);
    }
    out += '\n';
    if (out.size() > (1u << 16)) flush();
    return true;
  });
  flush();
  std::fflush(stdout);
  return ok ? 0 : 1;
}

int run_verify(const records_args& args) {
  uint64_t records = 0, bytes = 0;
  bool ok = for_each_record(args, true, [&](const std::string&, const tfrecord_record_view& rec) {
    ++records;
    bytes += rec.data.size();
    return true;
  });
  if (!ok) return 1;
  std::printf("verified %llu records (%llu payload bytes) in %zu file%s: every CRC is correct\n",
              static_cast<unsigned long long>(records), static_cast<unsigned long long>(bytes), args.files.size(),
              args.files.size() == 1 ? "" : "s");
  return 0;
}

int run_count(const records_args& args) {
  uint64_t total = 0;
  for (const auto& file : args.files) {
    records_args one = args;
    one.files = {file};
    uint64_t n = 0;
    // Counting still checks the length CRCs (a wrong length would miscount), not the data CRCs.
    if (!for_each_record(one, false, [&](const std::string&, const tfrecord_record_view&) { return ++n, true; }))
      return 1;
    std::printf("%s\t%llu\n", file.c_str(), static_cast<unsigned long long>(n));
    total += n;
  }
  std::printf("total\t%llu\n", static_cast<unsigned long long>(total));
  return 0;
}

}  // namespace

int run_records(int argc, char** argv) {
  records_args args;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") return records_usage(stdout);
    if (a == "--raw") {
      args.raw = true;
    } else if (a == "--compression" || a.starts_with("--compression=")) {
      std::string_view name;
      if (a == "--compression") {
        if (i + 1 >= argc) return records_usage(stderr);
        name = argv[++i];
      } else {
        name = a.substr(std::string_view("--compression=").size());
      }
      auto c = parse_record_compression(name);
      if (!c) {
        std::fprintf(stderr, "actorflow records: %s\n", c.error_value().message.c_str());
        return 2;
      }
      args.compression = *c;
    } else if (a.starts_with("--")) {
      std::fprintf(stderr, "actorflow records: unknown option '%s'\n", argv[i]);
      return records_usage(stderr);
    } else if (args.action.empty()) {
      args.action = a;
    } else {
      args.files.emplace_back(a);
    }
  }
  if (args.action.empty() || args.files.empty()) return records_usage(stderr);
  if (args.raw && args.action != "cat") {
    std::fprintf(stderr, "actorflow records: --raw goes with cat\n");
    return 2;
  }
  if (args.action == "cat") return run_cat(args);
  if (args.action == "verify") return run_verify(args);
  if (args.action == "count") return run_count(args);
  std::fprintf(stderr, "actorflow records: unknown action '%s'\n", args.action.c_str());
  return records_usage(stderr);
}

}  // namespace af::apps
