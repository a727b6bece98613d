#pragma once

// TFRecord files, bit-compatible with TensorFlow's tf.io.TFRecordWriter / TFRecordDataset.
//
// Each record, in the (uncompressed) stream:
//   uint64 LE  length
//   uint32 LE  mask_crc32c(crc32c of the 8 length bytes)
//   bytes      data[length]
//   uint32 LE  mask_crc32c(crc32c of data)
// A GZIP or ZLIB file is that same stream compressed as a whole (not record by record), so byte
// offsets below always count in the uncompressed stream.
//
// zlib stays inside tfrecord.cpp: this header includes only the standard library and ops/.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ops/error.hpp"

namespace af {

enum class record_compression : uint8_t { none, gzip, zlib };

/// "none", "gzip", "zlib".
std::string_view to_string(record_compression c) noexcept;
/// Parses "none"/"" , "gzip"/"GZIP", "zlib"/"ZLIB"; invalid_argument otherwise.
expected<record_compression> parse_record_compression(std::string_view name);
/// Guesses from the file name: ".gz" → gzip, ".zz" or ".zlib" → zlib, anything else → none.
record_compression compression_from_path(std::string_view path) noexcept;

/// Framing bytes around each payload: 12 before (length + its CRC), 4 after (data CRC).
inline constexpr std::size_t tfrecord_header_bytes = 12;
inline constexpr std::size_t tfrecord_footer_bytes = 4;

/// Appends one framed record (header, payload, footer) to `out`.
void append_tfrecord(std::string& out, std::string_view payload);

/// Writes a TFRecord file through a 1 MiB buffer (one write(2) per buffer, not per record).
/// Move-only; the destructor closes the file if close() was not called, ignoring errors, so call
/// close() to learn whether the data reached the file.
class tfrecord_writer {
 public:
  /// Creates (or truncates) `path`; io_error naming the path when that fails.
  static expected<tfrecord_writer> open(const std::string& path,
                                        record_compression compression = record_compression::none);

  tfrecord_writer(tfrecord_writer&&) noexcept;
  tfrecord_writer& operator=(tfrecord_writer&&) noexcept;
  ~tfrecord_writer();

  /// Appends one record. Errors name the path and the record index.
  expected<void> write(std::string_view payload);
  /// Pushes buffered bytes to the OS; a compressed stream is sync-flushed, so a reader can decode
  /// everything written so far.
  expected<void> flush();
  /// Finishes the compressed stream, writes everything and closes the file. Idempotent.
  expected<void> close();

  const std::string& path() const noexcept;
  uint64_t records_written() const noexcept;

 private:
  struct impl;
  explicit tfrecord_writer(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

/// Where a reader stands: `index` records have been read and the next one starts at byte
/// `offset` of the uncompressed stream. Saving it and passing it to tfrecord_reader::open_at
/// resumes at the same record (tf.data iterator save/restore).
struct tfrecord_position {
  uint64_t index = 0;
  uint64_t offset = 0;
  friend bool operator==(const tfrecord_position&, const tfrecord_position&) = default;
};

/// One record that owns its payload. Reusing the same object across reads (next(record&)) reuses
/// its string's capacity, so a steady stream of similar records allocates nothing.
struct tfrecord_record {
  std::string data;
  uint64_t index = 0;   ///< 0-based position of the record in the file
  uint64_t offset = 0;  ///< byte offset of its header in the uncompressed stream
};

/// A record whose payload points into the reader's buffer: valid until the next read call.
struct tfrecord_record_view {
  std::string_view data;
  uint64_t index = 0;
  uint64_t offset = 0;
};

struct tfrecord_reader_options {
  record_compression compression = record_compression::none;
  /// Checks each data CRC. The 4-byte length CRC is always checked: a corrupt length would make
  /// every later record unreadable, and checking 8 bytes costs nothing.
  bool verify_crc = true;
  /// Size of the read buffer (bytes of the uncompressed stream); at least 4 KiB is used.
  std::size_t buffer_bytes = std::size_t{1} << 20;
};

/// Reads a TFRecord file sequentially through one buffer: one read(2) per buffer, and records
/// that fit in the buffer are handed out without copying (next_view).
///
/// Every error is malformed_input (or io_error for the OS) and its message names the file, the
/// record index, the record's byte offset and what was wrong ("wrong length CRC", "wrong data
/// CRC", "truncated: file ends inside record N (needs X bytes at offset Y, has Z)", a length
/// larger than the file, a gzip/zlib stream error). A clean end of file between two records is
/// the end of the data. After an error the reader is stuck: every later call returns it again.
class tfrecord_reader {
 public:
  using options = tfrecord_reader_options;

  static expected<tfrecord_reader> open(const std::string& path, options opts = {});
  /// Opens `path` positioned at `pos` (from position()): a seek for uncompressed files; a
  /// compressed stream is decompressed and discarded up to pos.offset.
  static expected<tfrecord_reader> open_at(const std::string& path, tfrecord_position pos,
                                           options opts = {});

  tfrecord_reader(tfrecord_reader&&) noexcept;
  tfrecord_reader& operator=(tfrecord_reader&&) noexcept;
  ~tfrecord_reader();

  /// The next record (owning its payload), std::nullopt at the end, or an error.
  expected<std::optional<tfrecord_record>> next();
  /// Reads the next record into `out`, reusing its capacity: true for a record, false at the end.
  expected<bool> next(tfrecord_record& out);
  /// The next record without copying its payload: data stays valid until the next call on this
  /// reader. The fastest way through a file.
  expected<std::optional<tfrecord_record_view>> next_view();

  /// Records read so far and the offset of the next record.
  tfrecord_position position() const noexcept;
  const std::string& path() const noexcept;

 private:
  struct impl;
  explicit tfrecord_reader(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace af
