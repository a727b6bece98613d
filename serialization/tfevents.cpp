#include "serialization/tfevents.hpp"

#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>

namespace af::tfevents {

namespace fs = std::filesystem;

namespace {

// Protobuf wire types and the field numbers of the header's three messages.
constexpr uint32_t wire_varint = 0, wire_fixed64 = 1, wire_bytes = 2, wire_fixed32 = 5;
constexpr uint32_t event_wall_time = 1, event_step = 2, event_file_version = 3, event_summary = 5;
constexpr uint32_t summary_value = 1;
constexpr uint32_t value_tag = 1, value_simple_value = 2;

// -- encoding --------------------------------------------------------------------------------------

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, uint32_t field, uint32_t wire) { put_varint(out, (uint64_t{field} << 3) | wire); }
void put_fixed(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, wire_bytes);
  put_varint(out, bytes.size());
  out += bytes;
}

/// wall_time and step as proto3 writes them: left out when zero (-0.0 is not zero: protobuf
/// compares the bits).
void put_event_header(std::string& out, double wall_time, int64_t step) {
  const auto wall_bits = std::bit_cast<uint64_t>(wall_time);
  if (wall_bits != 0) {
    put_key(out, event_wall_time, wire_fixed64);
    put_fixed(out, wall_bits, 8);
  }
  if (step != 0) {
    put_key(out, event_step, wire_varint);
    put_varint(out, static_cast<uint64_t>(step));  // negative: ten bytes, as protobuf's int64
  }
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// -- decoding --------------------------------------------------------------------------------------

/// Reads protobuf fields; every method returns false when the bytes end too early or are invalid.
struct pb_reader {
  std::string_view bytes;
  std::size_t pos = 0;

  bool done() const noexcept { return pos >= bytes.size(); }
  bool varint(uint64_t& v) noexcept {
    v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos >= bytes.size()) return false;
      const auto b = static_cast<unsigned char>(bytes[pos++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return true;
    }
    return false;  // more than ten bytes
  }
  bool fixed(int n, uint64_t& v) noexcept {
    if (bytes.size() - pos < static_cast<std::size_t>(n)) return false;
    v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[pos + i])} << (8 * i);
    pos += static_cast<std::size_t>(n);
    return true;
  }
  bool length_delimited(std::string_view& out) noexcept {
    uint64_t n = 0;
    if (!varint(n) || n > bytes.size() - pos) return false;
    out = bytes.substr(pos, static_cast<std::size_t>(n));
    pos += static_cast<std::size_t>(n);
    return true;
  }
  bool skip(uint32_t wire) noexcept {
    uint64_t ignored = 0;
    std::string_view ignored_bytes;
    switch (wire) {
      case wire_varint: return varint(ignored);
      case wire_fixed64: return fixed(8, ignored);
      case wire_bytes: return length_delimited(ignored_bytes);
      case wire_fixed32: return fixed(4, ignored);
      default: return false;  // groups (3, 4) are not in these messages; 6 and 7 do not exist
    }
  }
  /// The next field's number and wire type; false at a truncated or zero key.
  bool key(uint32_t& field, uint32_t& wire) noexcept {
    uint64_t k = 0;
    if (!varint(k) || (k >> 3) == 0 || (k >> 3) > 0x1fffffff) return false;
    field = static_cast<uint32_t>(k >> 3);
    wire = static_cast<uint32_t>(k & 7);
    return true;
  }
};

std::string wire_error(const char* message, uint32_t field, uint32_t wire) {
  return std::string{message} + " field " + std::to_string(field) + " has wire type " + std::to_string(wire);
}

/// Parses one Event and appends its simple_value scalars; returns what is wrong, or "" when fine.
std::string parse_event(std::string_view bytes, std::vector<scalar_event>& out) {
  pb_reader r{bytes};
  double wall_time = 0;
  int64_t step = 0;
  std::vector<std::string_view> summaries;  // parsed last: step may follow the summary on the wire
  while (!r.done()) {
    uint32_t field = 0, wire = 0;
    if (!r.key(field, wire)) return std::string{"Event: bad field key at byte "} + std::to_string(r.pos);
    const std::size_t at = r.pos;
    bool ok = true;
    if (field == event_wall_time) {
      if (wire != wire_fixed64) return wire_error("Event:", field, wire);
      uint64_t bits = 0;
      ok = r.fixed(8, bits);
      wall_time = std::bit_cast<double>(bits);
    } else if (field == event_step) {
      if (wire != wire_varint) return wire_error("Event:", field, wire);
      uint64_t v = 0;
      ok = r.varint(v);
      step = static_cast<int64_t>(v);
    } else if (field == event_summary) {
      if (wire != wire_bytes) return wire_error("Event:", field, wire);
      std::string_view s;
      ok = r.length_delimited(s);
      summaries.push_back(s);
    } else {
      ok = r.skip(wire);
    }
    if (!ok) return std::string{"Event: field "} + std::to_string(field) + " at byte " + std::to_string(at) + " is truncated or invalid";
  }
  for (std::string_view summary : summaries) {
    pb_reader s{summary};
    while (!s.done()) {
      uint32_t field = 0, wire = 0;
      if (!s.key(field, wire)) return "Summary: bad field key";
      if (field != summary_value) {
        if (!s.skip(wire)) return std::string{"Summary: truncated field "} + std::to_string(field);
        continue;
      }
      std::string_view value;
      if (wire != wire_bytes) return wire_error("Summary:", field, wire);
      if (!s.length_delimited(value)) return "Summary: truncated value";
      pb_reader v{value};
      scalar_event e{{}, step, wall_time, 0.0f};
      bool simple = false;
      while (!v.done()) {
        uint32_t vf = 0, vw = 0;
        if (!v.key(vf, vw)) return "Summary.Value: bad field key";
        bool ok = true;
        if (vf == value_tag && vw == wire_bytes) {
          std::string_view tag;
          ok = v.length_delimited(tag);
          e.tag = std::string{tag};
        } else if (vf == value_simple_value && vw == wire_fixed32) {
          uint64_t bits = 0;
          ok = v.fixed(4, bits);
          e.value = std::bit_cast<float>(static_cast<uint32_t>(bits));
          simple = true;
        } else if (vf == value_tag || vf == value_simple_value) {
          return wire_error("Summary.Value:", vf, vw);
        } else {
          ok = v.skip(vw);
        }
        if (!ok) return std::string{"Summary.Value: field "} + std::to_string(vf) + " is truncated or invalid";
      }
      if (simple) out.push_back(std::move(e));
    }
  }
  return {};
}

}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view version) {
  std::string out;
  put_event_header(out, wall_time, 0);
  put_bytes(out, event_file_version, version);
  return out;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  put_bytes(v, value_tag, tag);
  put_key(v, value_simple_value, wire_fixed32);
  put_fixed(v, std::bit_cast<uint32_t>(value), 4);
  std::string summary;
  put_bytes(summary, summary_value, v);
  std::string out;
  put_event_header(out, wall_time, step);
  put_bytes(out, event_summary, summary);
  return out;
}

event_writer::event_writer(tfrecord_writer writer) : writer_(std::move(writer)) {}

expected<event_writer> event_writer::open(const std::string& log_dir) {
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  if (ec) return make_error(errc::io_error, "tfevents: cannot create log directory '" + log_dir + "': " + ec.message());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const std::string base = (fs::path(log_dir) / (std::string{"events.out.tfevents."} +
                                                 std::to_string(static_cast<long long>(std::time(nullptr))) + "." + host))
                               .string();
  // Two writers opened in the same second must not truncate each other's file.
  std::string path = base;
  for (int n = 1; fs::exists(path, ec); ++n) path = base + "." + std::to_string(n);
  auto writer = tfrecord_writer::open(path);
  if (!writer)
    return with_context(writer.error_value(), "tfevents: log directory '" + log_dir + "'");
  event_writer out{std::move(*writer)};
  AF_TRY(out.writer_.write(encode_file_version_event(now_seconds())));
  return out;
}

expected<void> event_writer::scalar(const std::string& tag, double value, int64_t step) {
  return writer_.write(encode_scalar_event(now_seconds(), step, tag, static_cast<float>(value)));
}

expected<void> event_writer::flush() { return writer_.flush(); }
expected<void> event_writer::close() { return writer_.close(); }
const std::string& event_writer::path() const { return writer_.path(); }

expected<std::vector<scalar_event>> read_scalars(const std::string& path) {
  AF_TRY_ASSIGN(auto reader, tfrecord_reader::open(path));
  std::vector<scalar_event> out;
  while (true) {
    AF_TRY_ASSIGN(auto record, reader.next_view());
    if (!record) return out;
    std::string problem = parse_event(record->data, out);
    if (!problem.empty())
      return make_error(errc::malformed_input, "events file '" + path + "', record " + std::to_string(record->index) +
                                                   " at byte offset " + std::to_string(record->offset) + ": " + problem);
  }
}

}  // namespace af::tfevents
