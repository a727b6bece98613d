#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/scratch_dir.hpp"
#include "serialization/tfevents.hpp"
#include "serialization/tfrecord.hpp"

namespace fs = std::filesystem;
using af::errc;
using af::testing::scratch_dir;
namespace tfevents = af::tfevents;

namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> records_of(const std::string& path) {
  auto reader = af::tfrecord_reader::open(path);
  REQUIRE(reader.has_value());
  std::vector<std::string> out;
  while (true) {
    auto record = reader->next();
    REQUIRE(record.has_value());
    if (!*record) return out;
    out.push_back((*record)->data);
  }
}

void write_records(const std::string& path, const std::vector<std::string>& records) {
  auto w = af::tfrecord_writer::open(path);
  REQUIRE(w.has_value());
  for (const auto& r : records) REQUIRE(w->write(r).has_value());
  REQUIRE(w->close().has_value());
}

}  // namespace

TEST_CASE("a scalar event encodes to the protobuf bytes computed by hand", "[cpu][tfevents]") {
  // Event{wall_time 1.5 (field 1, fixed64), step 3 (field 2, varint),
  //       summary (field 5) = Summary{value (field 1) = Value{tag "loss" (1), simple_value 0.25f (2, fixed32)}}}
  const std::string expected = from_hex(
      "09" "000000000000f83f"             // wall_time = 1.5 = 0x3ff8000000000000, little-endian
      "1003"                              // step = 3
      "2a0d"                              // summary, 13 bytes
      "0a0b"                              //   value, 11 bytes
      "0a046c6f7373"                      //     tag "loss"
      "150000803e");                      //     simple_value = 0.25f = 0x3e800000
  CHECK(tfevents::encode_scalar_event(1.5, 3, "loss", 0.25f) == expected);

  // proto3 leaves a zero step out; a oneof value is written even when it is 0.
  CHECK(tfevents::encode_scalar_event(1.5, 0, "a", 0.0f) ==
        from_hex("09000000000000f83f" "2a0a" "0a08" "0a0161" "1500000000"));
  // A negative int64 is ten varint bytes (two's complement).
  CHECK(tfevents::encode_scalar_event(1.5, -1, "a", 0.0f) ==
        from_hex("09000000000000f83f" "10ffffffffffffffffff01" "2a0a" "0a08" "0a0161" "1500000000"));
  // Event{wall_time 1.5, file_version "brain.Event:2" (field 3)}.
  CHECK(tfevents::encode_file_version_event(1.5) ==
        from_hex("09000000000000f83f" "1a0d") + "brain.Event:2");
}

TEST_CASE("an event writer's scalars read back with their tags, steps and values", "[cpu][tfevents]") {
  scratch_dir dir{"af_tfevents"};
  const std::string log_dir = dir.file("runs") + "/train";  // created by open()
  const double before = now_seconds();
  auto writer = tfevents::event_writer::open(log_dir);
  REQUIRE(writer.has_value());
  const std::string path = writer->path();
  CHECK(fs::path(path).parent_path() == fs::path(log_dir));
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);

  struct sample { std::string tag; double value; int64_t step; };
  const std::vector<sample> samples = {
      {"loss", 2.5, 0}, {"accuracy", 0.125, 0}, {"loss", 0.1, 1}, {"accuracy", 0.0, 1},
      {"train/learning rate", -3.0e-4, 1000000000000}, {"loss", 1e30, -7}};
  for (const auto& s : samples) REQUIRE(writer->scalar(s.tag, s.value, s.step).has_value());
  REQUIRE(writer->flush().has_value());
  REQUIRE(writer->close().has_value());
  REQUIRE(writer->close().has_value());  // idempotent
  const double after = now_seconds();

  // The first record announces the file version, as TensorBoard expects.
  auto records = records_of(path);
  REQUIRE(records.size() == samples.size() + 1);
  CHECK(records[0].size() == 9 + 2 + 13);
  CHECK(records[0].substr(9) == from_hex("1a0d") + "brain.Event:2");

  auto scalars = tfevents::read_scalars(path);
  REQUIRE(scalars.has_value());
  REQUIRE(scalars->size() == samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& got = (*scalars)[i];
    INFO(i);
    CHECK(got.tag == samples[i].tag);
    CHECK(got.step == samples[i].step);
    CHECK(got.value == static_cast<float>(samples[i].value));
    CHECK(got.wall_time >= before - 1e-3);
    CHECK(got.wall_time <= after + 1e-3);
    // Each record is exactly what the encoder makes of it.
    CHECK(records[i + 1] == tfevents::encode_scalar_event(got.wall_time, got.step, got.tag, got.value));
  }
}

TEST_CASE("two writers opened in the same log directory write separate files", "[cpu][tfevents]") {
  scratch_dir dir{"af_tfevents"};
  auto a = tfevents::event_writer::open(dir.path.string());
  auto b = tfevents::event_writer::open(dir.path.string());
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  CHECK(a->path() != b->path());
  REQUIRE(a->scalar("x", 1, 1).has_value());
  REQUIRE(b->scalar("y", 2, 2).has_value());
  REQUIRE(a->close().has_value());
  REQUIRE(b->close().has_value());
  CHECK(tfevents::read_scalars(a->path())->at(0).tag == "x");
  CHECK(tfevents::read_scalars(b->path())->at(0).tag == "y");
}

TEST_CASE("read_scalars skips other values and names the file and record of a bad event", "[cpu][tfevents]") {
  scratch_dir dir{"af_tfevents"};
  const std::string path = dir.file("events.out.tfevents.1.test");
  // An Event with an unknown field (7, varint) whose one Summary value is an (empty) image (field 4).
  const std::string image_only = from_hex("3801" "2a07" "0a05" "0a0161" "2200");
  const std::string scalar = tfevents::encode_scalar_event(2.0, 5, "ok", 1.5f);

  SECTION("values of other kinds and unknown fields are skipped") {
    write_records(path, {tfevents::encode_file_version_event(1.0), image_only, scalar});
    auto scalars = tfevents::read_scalars(path);
    REQUIRE(scalars.has_value());
    REQUIRE(scalars->size() == 1);
    CHECK((*scalars)[0].tag == "ok");
    CHECK((*scalars)[0].step == 5);
    CHECK((*scalars)[0].wall_time == 2.0);
    CHECK((*scalars)[0].value == 1.5f);
  }
  SECTION("a truncated protobuf") {
    write_records(path, {tfevents::encode_file_version_event(1.0), scalar.substr(0, scalar.size() - 2)});
    auto scalars = tfevents::read_scalars(path);
    REQUIRE_FALSE(scalars.has_value());
    CHECK(scalars.error_value().code == errc::malformed_input);
    CHECK(scalars.error_value().message.find(path) != std::string::npos);
    CHECK(scalars.error_value().message.find("record 1") != std::string::npos);
  }
  SECTION("every truncation of a scalar event is an error or fewer scalars, never a crash") {
    for (std::size_t n = 1; n < scalar.size(); ++n) {
      write_records(path, {scalar.substr(0, n)});
      auto scalars = tfevents::read_scalars(path);
      if (scalars.has_value()) CHECK(scalars->empty());
      else CHECK(scalars.error_value().message.find("record 0") != std::string::npos);
    }
  }
  SECTION("a wrong wire type for a known field") {
    write_records(path, {from_hex("1101")});  // step (field 2) as fixed64
    auto scalars = tfevents::read_scalars(path);
    REQUIRE_FALSE(scalars.has_value());
    CHECK(scalars.error_value().message.find("wire type") != std::string::npos);
  }
  SECTION("a corrupt record frame and a missing file") {
    write_records(path, {scalar});
    af::testing::flip_byte(path, 14);
    auto scalars = tfevents::read_scalars(path);
    REQUIRE_FALSE(scalars.has_value());
    CHECK(scalars.error_value().message.find(path) != std::string::npos);
    auto missing = tfevents::read_scalars(dir.file("nope"));
    REQUIRE_FALSE(missing.has_value());
    CHECK(missing.error_value().message.find(dir.file("nope")) != std::string::npos);
  }
}

TEST_CASE("opening an event writer where the log directory cannot exist names the directory", "[cpu][tfevents]") {
  scratch_dir dir{"af_tfevents"};
  std::ofstream(dir.file("a_file")) << "x";
  const std::string log_dir = dir.file("a_file") + "/logs";
  auto writer = tfevents::event_writer::open(log_dir);
  REQUIRE_FALSE(writer.has_value());
  CHECK(writer.error_value().code == errc::io_error);
  CHECK(writer.error_value().message.find(log_dir) != std::string::npos);
}
