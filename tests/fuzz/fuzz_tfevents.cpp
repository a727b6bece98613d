// Fuzzes tfevents::read_scalars, the reader of TensorBoard event files (TFRecords of Event protos).
//
// Input: a mode byte (low two bits), then
//   0  the events file itself (framing included);
//   1  Event protos separated by "\xfe\xfe\xfe\xfe", framed here with valid CRCs, so mutations
//      reach the Event/Summary/Value parser instead of failing the record CRC;
//   2  u64 wall_time bits, u64 step, u32 value bits, then the tag: one scalar written with
//      encode_scalar_event, which must read back exactly.
// Invariants: errors are malformed_input/io_error naming the file; every scalar read, written
// again with encode_scalar_event, reads back the same (bit for bit: NaN values and -0.0 included).

#include <bit>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "serialization/tfevents.hpp"
#include "serialization/tfrecord.hpp"

namespace {

using af::fuzz::fail;
using af::tfevents::scalar_event;

constexpr std::string_view record_separator = "\xfe\xfe\xfe\xfe";

bool same_scalar(const scalar_event& a, const scalar_event& b) {
  return a.tag == b.tag && a.step == b.step &&
         std::bit_cast<uint64_t>(a.wall_time) == std::bit_cast<uint64_t>(b.wall_time) &&
         std::bit_cast<uint32_t>(a.value) == std::bit_cast<uint32_t>(b.value);
}

std::string describe(const scalar_event& e) {
  return "scalar '" + e.tag + "' step " + std::to_string(e.step) + " value " + std::to_string(e.value);
}

// Writes `events` as an events file (file_version first, as TensorFlow does) and reads it back.
std::vector<scalar_event> write_and_read(af::fuzz::memory_file& file, const std::vector<scalar_event>& events) {
  std::string bytes;
  af::append_tfrecord(bytes, af::tfevents::encode_file_version_event(1.0));
  for (const auto& e : events)
    af::append_tfrecord(bytes, af::tfevents::encode_scalar_event(e.wall_time, e.step, e.tag, e.value));
  file.assign(bytes);
  auto read = af::tfevents::read_scalars(file.path());
  if (!read) fail("scalars written by encode_scalar_event do not read back: " + read.error_value().to_string());
  return *read;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static af::fuzz::memory_file file;
  af::fuzz::input_reader in{af::fuzz::as_chars(data, size)};
  const unsigned mode = in.byte() & 3;

  if (mode == 2) {
    scalar_event e;
    e.wall_time = std::bit_cast<double>(in.uint(8));
    e.step = static_cast<int64_t>(in.uint(8));
    e.value = std::bit_cast<float>(static_cast<uint32_t>(in.uint(4)));
    e.tag = std::string(in.rest);
    auto back = write_and_read(file, {e});
    AF_FUZZ_CHECK(back.size() == 1 && same_scalar(back[0], e), describe(e) + " does not read back as written");
    return 0;
  }

  if (mode == 0) {
    file.assign(in.rest);
  } else {
    std::string framed;
    for (std::string_view event : af::fuzz::split(in.rest, record_separator)) af::append_tfrecord(framed, event);
    file.assign(framed);
  }
  auto scalars = af::tfevents::read_scalars(file.path());
  if (!scalars) {
    af::fuzz::check_parse_error(scalars.error_value(), "read_scalars");
    AF_FUZZ_CHECK(scalars.error_value().message.find(file.path()) != std::string::npos,
          "read_scalars's error does not name the file: " + scalars.error_value().message);
    return 0;
  }
  auto again = write_and_read(file, *scalars);
  AF_FUZZ_CHECK(again.size() == scalars->size(), "re-written scalars read back as " + std::to_string(again.size()) +
                                             " instead of " + std::to_string(scalars->size()));
  for (std::size_t i = 0; i < again.size(); ++i)
    AF_FUZZ_CHECK(same_scalar(again[i], (*scalars)[i]), describe((*scalars)[i]) + " reads back as " + describe(again[i]));
  return 0;
}
