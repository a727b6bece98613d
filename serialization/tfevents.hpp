#pragma once

// TensorBoard event files ("events.out.tfevents.*"): a TFRecord file of tensorflow.Event protos.
// We write only scalars and hand-encode the few protobuf fields involved, so no protobuf library:
//   Event   { double wall_time = 1; int64 step = 2; oneof what { string file_version = 3;
//             Summary summary = 5; } }                        (tensorflow/core/util/event.proto)
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; oneof value { float simple_value = 2; } }
//                                                       (tensorflow/core/framework/summary.proto)
// Encoded as protobuf itself would (proto3): wall_time and step are left out when zero, oneof
// members (file_version, summary, simple_value) are always written, fields in number order.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/error.hpp"
#include "serialization/tfrecord.hpp"

namespace af::tfevents {

/// The file_version of the first event of every file, as TensorFlow 2 writes it.
inline constexpr std::string_view file_version = "brain.Event:2";

/// The serialized Event{wall_time, step, file_version} that opens an events file.
std::string encode_file_version_event(double wall_time, std::string_view version = file_version);
/// The serialized Event{wall_time, step, summary{value{tag, simple_value}}} of one scalar.
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

/// Appends scalars to a new events file that TensorBoard reads as one run of `log_dir`.
/// Move-only; a moved-from writer may only be destroyed or assigned to. The destructor closes the
/// file, ignoring errors: call close() to learn whether everything reached it.
class event_writer {
 public:
  /// Creates `log_dir` if missing and the file `events.out.tfevents.<unix seconds>.<hostname>` in it
  /// (with `.<n>` appended when a file of that name exists already, i.e. two writers in the same
  /// second), and writes the file_version event. io_error naming the directory or file.
  static expected<event_writer> open(const std::string& log_dir);

  event_writer(event_writer&&) noexcept = default;
  event_writer& operator=(event_writer&&) noexcept = default;
  ~event_writer() = default;

  /// Appends one Event holding the scalar `tag` = `value` (stored as float, as TensorBoard does) at
  /// `step`, stamped with the current time. Several tags per step are fine.
  expected<void> scalar(const std::string& tag, double value, int64_t step);
  /// Hands buffered events to the OS, so TensorBoard sees them.
  expected<void> flush();
  /// Writes everything and closes the file. Idempotent.
  expected<void> close();

  const std::string& path() const;

 private:
  explicit event_writer(tfrecord_writer writer);
  tfrecord_writer writer_;
};

/// One scalar as read back from an events file.
struct scalar_event {
  std::string tag;
  int64_t step = 0;
  double wall_time = 0;
  float value = 0;
};

/// Every simple_value scalar of the events file `path`, in file order (an Event carrying several
/// values gives several entries). Events without a summary and values of other kinds (images,
/// histograms, tensor summaries) are skipped. malformed_input naming the file and the record index
/// for bad framing (from tfrecord_reader) or a protobuf that does not parse; io_error when the file
/// cannot be read.
expected<std::vector<scalar_event>> read_scalars(const std::string& path);

}  // namespace af::tfevents
