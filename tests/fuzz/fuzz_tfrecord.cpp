// Fuzzes tfrecord_reader: framing, length and CRC checks, records larger than the read buffer, the
// GZIP/ZLIB decompression, and open_at.
//
// Input: one mode byte, then the body.
//   bits 0-1  what the body is: 0 the file itself; 1 a GZIP file; 2 a ZLIB file; 3 an uncompressed
//             stream that this target compresses (bit 2: GZIP, else ZLIB; bit 5: as two
//             concatenated streams), so the fuzzer reaches the record framing behind zlib too
//   bit 3     verify_crc off
//   bit 4     a 4 KiB read buffer (the smallest, else 64 KiB), so records beyond it take the
//             large-record path
//   bits 6-7  the read call: next_view, next(record&), next(), or next_view and then open_at at
//             one of the positions seen and at an arbitrary one
// Invariants: errors are malformed_input/io_error with a message and stay (every later call
// returns the same error); indexes count up from 0 and offsets advance by the framed size; a
// record's bytes are the payload at its offset; a compressed stream gives exactly the records,
// and the outcome, of the same stream uncompressed; open_at resumes with the same records.

#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "serialization/tfrecord.hpp"

namespace {

using af::record_compression;
using af::tfrecord_position;
using af::tfrecord_reader;
using af::fuzz::fail;

enum class read_call { next_view, next_into, next_owning, reopen };

struct read_result {
  std::vector<std::string> records;
  std::vector<tfrecord_position> starts;  // position() before each record, and at the end
  std::optional<af::error> failure;
};

// Reads every record with one of the read calls and checks what must hold of any reader.
read_result read_all(tfrecord_reader& reader, read_call call, tfrecord_position start) {
  read_result out;
  tfrecord_position at = start;
  af::tfrecord_record reused;
  for (;;) {
    AF_FUZZ_CHECK(reader.position() == at, "position() does not follow the records read");
    out.starts.push_back(at);
    std::optional<std::pair<std::string, tfrecord_position>> got;  // data and (index, offset)
    std::optional<af::error> err;
    if (call == read_call::next_into) {
      auto r = reader.next(reused);
      if (!r) err = r.error_value();
      else if (*r) got.emplace(reused.data, tfrecord_position{reused.index, reused.offset});
    } else if (call == read_call::next_owning) {
      auto r = reader.next();
      if (!r) err = r.error_value();
      else if (*r) got.emplace((*r)->data, tfrecord_position{(*r)->index, (*r)->offset});
    } else {
      auto r = reader.next_view();
      if (!r) err = r.error_value();
      else if (*r) got.emplace(std::string((*r)->data), tfrecord_position{(*r)->index, (*r)->offset});
    }
    if (err) {
      af::fuzz::check_parse_error(*err, "tfrecord_reader");
      AF_FUZZ_CHECK(err->message.find(reader.path()) != std::string::npos, "reader error does not name the file: " + err->message);
      auto again = reader.next_view();
      AF_FUZZ_CHECK(!again && again.error_value().message == err->message, "a reader error did not stick: " + err->message);
      AF_FUZZ_CHECK(reader.position() == at, "position() moved on a failed read");
      out.failure = err;
      return out;
    }
    if (!got) {
      auto again = reader.next_view();
      AF_FUZZ_CHECK(again && !*again, "the end of the records did not stay the end");
      return out;
    }
    AF_FUZZ_CHECK(got->second == at, "record index/offset " + std::to_string(got->second.index) + "/" +
                                 std::to_string(got->second.offset) + " differ from position() " +
                                 std::to_string(at.index) + "/" + std::to_string(at.offset));
    at = {at.index + 1, at.offset + af::tfrecord_header_bytes + got->first.size() + af::tfrecord_footer_bytes};
    out.records.push_back(std::move(got->first));
  }
}

read_result read_file(const std::string& path, af::tfrecord_reader_options opts, read_call call) {
  auto reader = tfrecord_reader::open(path, opts);
  if (!reader) fail("tfrecord_reader::open of an existing file failed: " + reader.error_value().to_string());
  return read_all(*reader, call, {});
}

// The payloads sit at their offsets in the uncompressed stream.
void check_against_stream(const read_result& r, std::string_view stream) {
  for (std::size_t i = 0; i < r.records.size(); ++i) {
    const uint64_t payload_at = r.starts[i].offset + af::tfrecord_header_bytes;
    AF_FUZZ_CHECK(payload_at + r.records[i].size() <= stream.size() &&
              stream.substr(payload_at, r.records[i].size()) == r.records[i],
          "record " + std::to_string(i) + " is not the payload at its offset");
  }
}

void check_same_outcome(const read_result& a, const read_result& b, const char* what) {
  AF_FUZZ_CHECK(a.records == b.records, std::string(what) + ": different records (" + std::to_string(a.records.size()) +
                                    " vs " + std::to_string(b.records.size()) + ")");
  AF_FUZZ_CHECK(a.failure.has_value() == b.failure.has_value(),
        std::string(what) + ": one read ended cleanly, the other failed: " +
            (a.failure ? a.failure->message : b.failure->message));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static af::fuzz::memory_file file;
  static af::fuzz::memory_file plain_file;
  af::fuzz::input_reader in{af::fuzz::as_chars(data, size)};
  const uint8_t mode = in.byte();
  const std::string_view body = in.rest;

  af::tfrecord_reader_options opts;
  opts.verify_crc = (mode & 0x08) == 0;
  // 64 KiB rather than the default 1 MiB: a fresh buffer per reader under ASan costs more than the
  // parsing, and fuzz inputs are far smaller anyway.
  opts.buffer_bytes = (mode & 0x10) ? 4096 : 64 * 1024;
  const auto call = static_cast<read_call>(mode >> 6);
  const read_call first_call = call == read_call::reopen ? read_call::next_view : call;

  std::string compressed;
  switch (mode & 3) {
    case 0: opts.compression = record_compression::none; break;
    case 1: opts.compression = record_compression::gzip; break;
    case 2: opts.compression = record_compression::zlib; break;
    case 3: {
      const bool gzip = (mode & 0x04) != 0;
      opts.compression = gzip ? record_compression::gzip : record_compression::zlib;
      if (mode & 0x20) {
        const std::size_t half = body.size() / 2;
        compressed = af::fuzz::compress(body.substr(0, half), gzip) + af::fuzz::compress(body.substr(half), gzip);
      } else {
        compressed = af::fuzz::compress(body, gzip);
      }
      break;
    }
  }
  file.assign((mode & 3) == 3 ? std::string_view(compressed) : body);
  const read_result result = read_file(file.path(), opts, first_call);

  if ((mode & 3) == 0) check_against_stream(result, body);
  if ((mode & 3) == 3) {
    check_against_stream(result, body);
    plain_file.assign(body);
    auto plain_opts = opts;
    plain_opts.compression = record_compression::none;
    check_same_outcome(result, read_file(plain_file.path(), plain_opts, first_call), "compressed vs uncompressed");
  }

  if (call == read_call::reopen) {
    // A position that need not be a record's start (a stale or corrupt saved position): records or
    // errors, nothing else.
    const tfrecord_position anywhere{body.size() % 5, body.size() * 3 / 7 + (mode & 0x20 ? 1000 : 0)};
    if (auto reader = tfrecord_reader::open_at(file.path(), anywhere, opts); reader) {
      (void)read_all(*reader, read_call::next_view, anywhere);
    } else {
      const af::error& e = reader.error_value();
      AF_FUZZ_CHECK(e.code == af::errc::out_of_range || e.code == af::errc::malformed_input ||
                        e.code == af::errc::io_error,
                    "open_at failed with " + e.to_string());
    }
    // Resume at one of the positions the first pass passed through (the end included when clean).
    const std::size_t known = result.records.size() + (result.failure ? 0 : 1);
    if (known == 0) return 0;
    const std::size_t k = (body.size() * 7 + result.records.size()) % known;
    auto reader = tfrecord_reader::open_at(file.path(), result.starts[k], opts);
    if (!reader) fail("open_at a position the reader reported failed: " + reader.error_value().to_string());
    read_result rest = read_all(*reader, read_call::next_view, result.starts[k]);
    read_result expected;
    expected.records.assign(result.records.begin() + static_cast<std::ptrdiff_t>(k), result.records.end());
    expected.failure = result.failure;
    check_same_outcome(rest, expected, "open_at");
  }
  return 0;
}
