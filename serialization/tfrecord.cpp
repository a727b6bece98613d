#include "serialization/tfrecord.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>

#include <zlib.h>

#include "serialization/crc32c.hpp"
#include "serialization/write_fully.hpp"

namespace af {

namespace {

constexpr std::size_t io_buffer_bytes = std::size_t{1} << 20;
constexpr std::size_t compressed_input_bytes = std::size_t{256} << 10;
// zlib counts in uInt (32 bits): larger spans go through in pieces of this size.
constexpr std::size_t zlib_chunk = std::size_t{1} << 30;

void put_u32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
void put_u64(char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
uint32_t get_u32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}
uint64_t get_u64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

error os_error(const std::string& what, const std::string& path) {
  return make_error(errc::io_error, what + " " + path + ": " + std::strerror(errno));
}

// Window bits for inflateInit2/deflateInit2: +16 selects the gzip wrapper instead of zlib's.
int window_bits(record_compression c) { return c == record_compression::gzip ? 16 + MAX_WBITS : MAX_WBITS; }

}  // namespace

std::string_view to_string(record_compression c) noexcept {
  switch (c) {
    case record_compression::none: return "none";
    case record_compression::gzip: return "gzip";
    case record_compression::zlib: return "zlib";
  }
  return "none";
}

expected<record_compression> parse_record_compression(std::string_view name) {
  std::string lower(name);
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower.empty() || lower == "none") return record_compression::none;
  if (lower == "gzip") return record_compression::gzip;
  if (lower == "zlib") return record_compression::zlib;
  return make_error(errc::invalid_argument,
                    "unknown compression '" + std::string(name) + "' (expected none, gzip or zlib)");
}

record_compression compression_from_path(std::string_view path) noexcept {
  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
  };
  if (ends_with(".gz")) return record_compression::gzip;
  if (ends_with(".zz") || ends_with(".zlib")) return record_compression::zlib;
  return record_compression::none;
}

void append_tfrecord(std::string& out, std::string_view payload) {
  char header[tfrecord_header_bytes];
  put_u64(header, payload.size());
  put_u32(header + 8, masked_crc32c(header, 8));
  char footer[tfrecord_footer_bytes];
  put_u32(footer, masked_crc32c(payload.data(), payload.size()));
  out.append(header, sizeof header);
  out.append(payload);
  out.append(footer, sizeof footer);
}

// ---- writer ------------------------------------------------------------------------------------

struct tfrecord_writer::impl {
  std::string path;
  record_compression compression = record_compression::none;
  int fd = -1;
  std::string pending;  // uncompressed bytes not yet handed to the OS (or to deflate)
  std::unique_ptr<unsigned char[]> deflated;
  z_stream zs{};
  bool zs_ready = false;
  uint64_t records = 0;
  bool closed = false;
  error failed;  // the first error; every later call returns it

  ~impl() {
    if (zs_ready) deflateEnd(&zs);
    if (fd >= 0) ::close(fd);
  }

  expected<void> write_all(const char* p, std::size_t n) {
    if (!io::write_fully(fd, p, n)) return os_error("cannot write", path);
    return {};
  }

  // Hands `n` bytes of the uncompressed stream on: straight to the file, or through deflate with
  // `flush` (Z_NO_FLUSH while writing, Z_SYNC_FLUSH on flush(), Z_FINISH on close()).
  expected<void> drain(const char* p, std::size_t n, int flush) {
    if (compression == record_compression::none) return write_all(p, n);
    do {
      std::size_t piece = std::min(n, zlib_chunk);
      bool last = piece == n;
      int mode = last ? flush : Z_NO_FLUSH;
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(p));
      zs.avail_in = static_cast<uInt>(piece);
      int r;
      do {
        zs.next_out = deflated.get();
        zs.avail_out = static_cast<uInt>(io_buffer_bytes);
        r = deflate(&zs, mode);
        if (r == Z_STREAM_ERROR)
          return make_error(errc::io_error, "cannot compress into " + path + ": zlib stream error");
        AF_TRY(write_all(reinterpret_cast<const char*>(deflated.get()), io_buffer_bytes - zs.avail_out));
      } while (zs.avail_out == 0 || (mode == Z_FINISH && r != Z_STREAM_END));
      p += piece;
      n -= piece;
    } while (n > 0);
    return {};
  }

  expected<void> put(const char* p, std::size_t n) {
    if (pending.size() + n > io_buffer_bytes) {
      AF_TRY(drain(pending.data(), pending.size(), Z_NO_FLUSH));
      pending.clear();
    }
    if (n >= io_buffer_bytes) return drain(p, n, Z_NO_FLUSH);  // big payloads skip the copy
    pending.append(p, n);
    return {};
  }

  expected<void> check_usable() const {
    if (failed) return failed;
    if (closed) return make_error(errc::invalid_argument, "write to " + path + " after close()");
    return {};
  }

  expected<void> remember(expected<void> result) {
    if (!result) failed = result.error_value();
    return result;
  }
};

tfrecord_writer::tfrecord_writer(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
tfrecord_writer::tfrecord_writer(tfrecord_writer&&) noexcept = default;
tfrecord_writer& tfrecord_writer::operator=(tfrecord_writer&&) noexcept = default;
tfrecord_writer::~tfrecord_writer() {
  if (impl_) (void)close();
}

expected<tfrecord_writer> tfrecord_writer::open(const std::string& path, record_compression compression) {
  auto state = std::make_unique<impl>();
  state->path = path;
  state->compression = compression;
  state->fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (state->fd < 0) return os_error("cannot create", path);
  state->pending.reserve(io_buffer_bytes);
  if (compression != record_compression::none) {
    state->deflated.reset(new unsigned char[io_buffer_bytes]);
    // TensorFlow's ZlibCompressionOptions defaults: default level, memLevel 9, 32 KiB window.
    if (deflateInit2(&state->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits(compression), 9,
                     Z_DEFAULT_STRATEGY) != Z_OK)
      return make_error(errc::out_of_memory, "cannot start zlib compression for " + path);
    state->zs_ready = true;
  }
  return tfrecord_writer(std::move(state));
}

expected<void> tfrecord_writer::write(std::string_view payload) {
  impl& s = *impl_;
  AF_TRY(s.check_usable());
  char header[tfrecord_header_bytes];
  put_u64(header, payload.size());
  put_u32(header + 8, masked_crc32c(header, 8));
  char footer[tfrecord_footer_bytes];
  put_u32(footer, masked_crc32c(payload.data(), payload.size()));
  AF_TRY(s.remember(s.put(header, sizeof header)));
  AF_TRY(s.remember(s.put(payload.data(), payload.size())));
  AF_TRY(s.remember(s.put(footer, sizeof footer)));
  ++s.records;
  return {};
}

expected<void> tfrecord_writer::flush() {
  impl& s = *impl_;
  AF_TRY(s.check_usable());
  AF_TRY(s.remember(s.drain(s.pending.data(), s.pending.size(), Z_SYNC_FLUSH)));
  s.pending.clear();
  return {};
}

expected<void> tfrecord_writer::close() {
  impl& s = *impl_;
  if (s.closed) return s.failed ? expected<void>(s.failed) : expected<void>();
  s.closed = true;
  expected<void> result;
  if (!s.failed) result = s.remember(s.drain(s.pending.data(), s.pending.size(), Z_FINISH));
  s.pending.clear();
  if (s.zs_ready) {
    deflateEnd(&s.zs);
    s.zs_ready = false;
  }
  if (::close(s.fd) != 0 && result) result = s.remember(os_error("cannot close", s.path));
  s.fd = -1;
  if (s.failed) return s.failed;
  return result;
}

const std::string& tfrecord_writer::path() const noexcept { return impl_->path; }
uint64_t tfrecord_writer::records_written() const noexcept { return impl_->records; }

// ---- reader ------------------------------------------------------------------------------------

namespace {

// Decompresses a GZIP or ZLIB file. Concatenated streams (as `cat a.gz b.gz` makes) are read one
// after the other, like gzip -d does. An error that arrives after some bytes were produced is kept
// for the next call, so the reader first receives every record that decoded intact.
class inflater {
 public:
  inflater(int fd, record_compression c) : fd_(fd), kind_(c == record_compression::gzip ? "gzip" : "zlib") {
    input_.reset(new unsigned char[compressed_input_bytes]);
    ready_ = inflateInit2(&zs_, window_bits(c)) == Z_OK;
  }
  ~inflater() {
    if (ready_) inflateEnd(&zs_);
  }
  inflater(const inflater&) = delete;
  inflater& operator=(const inflater&) = delete;

  bool ready() const noexcept { return ready_; }

  // Up to n uncompressed bytes into dst; 0 at the clean end of the (last) stream.
  expected<std::size_t> read(char* dst, std::size_t n) {
    if (stashed_) return stashed_;
    n = std::min(n, zlib_chunk);
    zs_.next_out = reinterpret_cast<Bytef*>(dst);
    zs_.avail_out = static_cast<uInt>(n);
    error failure;
    while (zs_.avail_out > 0) {
      if (zs_.avail_in == 0 && !input_eof_) {
        ssize_t got = ::read(fd_, input_.get(), compressed_input_bytes);
        if (got < 0) {
          if (errno == EINTR) continue;
          failure = make_error(errc::io_error, std::string("read failed: ") + std::strerror(errno));
          break;
        }
        if (got == 0) {
          input_eof_ = true;
        } else {
          zs_.next_in = input_.get();
          zs_.avail_in = static_cast<uInt>(got);
          compressed_read_ += static_cast<uint64_t>(got);
        }
      }
      if (stream_done_) {
        if (zs_.avail_in == 0) {
          if (input_eof_) break;  // clean end after a complete stream
          continue;
        }
        inflateReset(&zs_);  // another concatenated stream follows
        stream_done_ = false;
      }
      if (zs_.avail_in == 0 && input_eof_) {
        if (compressed_read_ == 0) break;  // an empty file holds no records
        failure = make_error(errc::malformed_input,
                             std::string(kind_) + " stream is truncated: the file ends after " +
                                 std::to_string(compressed_read_) +
                                 " compressed bytes, before the end-of-stream marker");
        break;
      }
      int r = inflate(&zs_, Z_NO_FLUSH);
      if (r == Z_STREAM_END) {
        stream_done_ = true;
      } else if (r != Z_OK && r != Z_BUF_ERROR) {  // Z_BUF_ERROR: needs more input, loop refills
        failure = make_error(errc::malformed_input,
                             std::string(kind_) + " stream error: " + (zs_.msg ? zs_.msg : "zlib code " + std::to_string(r)) +
                                 " (near compressed byte " + std::to_string(compressed_read_ - zs_.avail_in) + ")");
        break;
      }
    }
    std::size_t produced = n - zs_.avail_out;
    if (failure) {
      stashed_ = failure;
      if (produced == 0) return failure;
    }
    return produced;
  }

 private:
  int fd_;
  const char* kind_;
  z_stream zs_{};
  bool ready_ = false;
  std::unique_ptr<unsigned char[]> input_;
  bool input_eof_ = false;
  bool stream_done_ = false;
  uint64_t compressed_read_ = 0;
  error stashed_;
};

}  // namespace

struct tfrecord_reader::impl {
  std::string path;
  options opts;
  int fd = -1;
  bool size_known = false;  // a regular uncompressed file: lengths are checked against its size
  uint64_t file_size = 0;
  std::unique_ptr<inflater> inflate;
  std::unique_ptr<char[]> buf;
  std::size_t cap = 0, pos = 0, end = 0;
  std::string scratch;  // records larger than the buffer
  uint64_t index = 0, offset = 0;
  error stuck;

  ~impl() {
    if (fd >= 0) ::close(fd);
  }

  expected<std::size_t> source_read(char* dst, std::size_t n) {
    if (inflate) return inflate->read(dst, n);
    for (;;) {
      ssize_t got = ::read(fd, dst, n);
      if (got >= 0) return static_cast<std::size_t>(got);
      if (errno != EINTR)
        return make_error(errc::io_error, std::string("read failed: ") + std::strerror(errno));
    }
  }

  // Makes up to n (<= cap) bytes available at buf[pos..]; returns how many are (fewer only at the
  // end of the stream). Reads as much as fits, so small records cost no system call each.
  expected<std::size_t> ensure(std::size_t n) {
    if (end - pos >= n) return n;
    if (pos + n > cap) {
      std::memmove(buf.get(), buf.get() + pos, end - pos);
      end -= pos;
      pos = 0;
    }
    while (end - pos < n) {
      AF_TRY_ASSIGN(std::size_t got, source_read(buf.get() + end, cap - end));
      if (got == 0) break;
      end += got;
    }
    return std::min(n, end - pos);
  }

  std::string where() const {
    return path + ": record " + std::to_string(index) + " at offset " + std::to_string(offset);
  }
  error bad(const std::string& what) const { return make_error(errc::malformed_input, where() + ": " + what); }
  error wrap(const error& e) const { return make_error(e.code, where() + ": " + e.message); }
  error truncated(uint64_t needs, uint64_t has) const {
    return make_error(errc::malformed_input,
                      path + ": truncated: file ends inside record " + std::to_string(index) + " (needs " +
                          std::to_string(needs) + " bytes at offset " + std::to_string(offset) +
                          ", has " + std::to_string(has) + ")");
  }

  expected<bool> read_next(tfrecord_record_view& out) {
    if (stuck) return stuck;
    auto r = read_next_unchecked(out);
    if (!r) stuck = r.error_value();
    return r;
  }

  expected<bool> read_next_unchecked(tfrecord_record_view& out) {
    auto have = ensure(tfrecord_header_bytes);
    if (!have) return wrap(have.error_value());
    if (*have == 0) return false;  // clean end between records
    if (*have < tfrecord_header_bytes) return truncated(tfrecord_header_bytes, *have);

    const char* header = buf.get() + pos;
    const uint64_t length = get_u64(header);
    const uint32_t stored_length_crc = get_u32(header + 8);
    const uint32_t length_crc = masked_crc32c(header, 8);
    if (stored_length_crc != length_crc)
      return bad("wrong length CRC (stored " + hex32(stored_length_crc) + ", computed " + hex32(length_crc) +
                 " for length field " + std::to_string(length) + ")");
    constexpr uint64_t framing = tfrecord_header_bytes + tfrecord_footer_bytes;
    if (length > UINT64_MAX - framing) return bad("corrupt length " + std::to_string(length));
    const uint64_t total = length + framing;
    if (size_known) {
      // Checked before any allocation: a corrupt length must not ask for gigabytes.
      const uint64_t remaining = file_size > offset ? file_size - offset : 0;
      if (length > file_size)
        return bad("length " + std::to_string(length) + " is larger than the whole file (" +
                   std::to_string(file_size) + " bytes): corrupt length");
      if (total > remaining) return truncated(total, remaining);
    }

    const char* footer = nullptr;
    if (total <= cap) {
      auto got = ensure(static_cast<std::size_t>(total));
      if (!got) return wrap(got.error_value());
      if (*got < total) return truncated(total, *got);
      out.data = std::string_view(buf.get() + pos + tfrecord_header_bytes, static_cast<std::size_t>(length));
      footer = buf.get() + pos + tfrecord_header_bytes + length;
      pos += static_cast<std::size_t>(total);
    } else {
      AF_TRY(read_large(length, total));
      auto got = ensure(tfrecord_footer_bytes);
      if (!got) return wrap(got.error_value());
      if (*got < tfrecord_footer_bytes) return truncated(total, tfrecord_header_bytes + length + *got);
      out.data = scratch;
      footer = buf.get() + pos;
      pos += tfrecord_footer_bytes;
    }
    if (opts.verify_crc) {
      const uint32_t stored = get_u32(footer);
      const uint32_t computed = masked_crc32c(out.data.data(), out.data.size());
      if (stored != computed)
        return bad("wrong data CRC (stored " + hex32(stored) + ", computed " + hex32(computed) + " over " +
                   std::to_string(length) + " bytes)");
    }
    out.index = index;
    out.offset = offset;
    ++index;
    offset += total;
    return true;
  }

  // A payload larger than the buffer goes into `scratch`: what is buffered is copied, the rest is
  // read straight into place. Without a known file size (compressed input) the string grows only
  // as data actually arrives, so a corrupt length cannot allocate more than the stream holds.
  expected<void> read_large(uint64_t length, uint64_t total) {
    pos += tfrecord_header_bytes;
    if (length > scratch.max_size()) return bad("length " + std::to_string(length) + " cannot be held in memory");
    const auto len = static_cast<std::size_t>(length);
    std::size_t copied = std::min(end - pos, len);
    scratch.resize(size_known ? len : std::max(copied, std::min(len, cap)));
    std::memcpy(scratch.data(), buf.get() + pos, copied);
    pos += copied;
    while (copied < len) {
      if (scratch.size() == copied) scratch.resize(std::min(len, copied * 2));
      auto got = source_read(scratch.data() + copied, scratch.size() - copied);
      if (!got) return wrap(got.error_value());
      if (*got == 0) return truncated(total, tfrecord_header_bytes + copied);
      copied += *got;
    }
    return {};
  }

  expected<void> skip_to(tfrecord_position target) {
    if (!inflate) {
      if (size_known && target.offset > file_size)
        return make_error(errc::out_of_range, path + ": cannot restore position at offset " +
                                                  std::to_string(target.offset) + ": the file has only " +
                                                  std::to_string(file_size) + " bytes");
      if (::lseek(fd, static_cast<off_t>(target.offset), SEEK_SET) < 0) return os_error("cannot seek in", path);
    } else {
      uint64_t left = target.offset;
      while (left > 0) {
        auto got = ensure(static_cast<std::size_t>(std::min<uint64_t>(left, cap)));
        if (!got) return with_context(got.error_value(), path + ": while skipping to offset " + std::to_string(target.offset));
        if (*got == 0)
          return make_error(errc::out_of_range, path + ": cannot restore position at offset " +
                                                    std::to_string(target.offset) + ": the stream has only " +
                                                    std::to_string(target.offset - left) + " bytes");
        pos += *got;
        left -= *got;
      }
    }
    index = target.index;
    offset = target.offset;
    return {};
  }
};

tfrecord_reader::tfrecord_reader(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
tfrecord_reader::tfrecord_reader(tfrecord_reader&&) noexcept = default;
tfrecord_reader& tfrecord_reader::operator=(tfrecord_reader&&) noexcept = default;
tfrecord_reader::~tfrecord_reader() = default;

expected<tfrecord_reader> tfrecord_reader::open(const std::string& path, options opts) {
  auto state = std::make_unique<impl>();
  state->path = path;
  state->opts = opts;
  state->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (state->fd < 0) return os_error("cannot open", path);
  struct stat st {};
  if (::fstat(state->fd, &st) == 0 && S_ISREG(st.st_mode) && opts.compression == record_compression::none) {
    state->size_known = true;
    state->file_size = static_cast<uint64_t>(st.st_size);
  }
  if (opts.compression != record_compression::none) {
    state->inflate = std::make_unique<inflater>(state->fd, opts.compression);
    if (!state->inflate->ready())
      return make_error(errc::out_of_memory, "cannot start zlib decompression for " + path);
  }
  state->cap = std::max<std::size_t>(opts.buffer_bytes, 4096);
  state->buf.reset(new char[state->cap]);
  return tfrecord_reader(std::move(state));
}

expected<tfrecord_reader> tfrecord_reader::open_at(const std::string& path, tfrecord_position pos, options opts) {
  AF_TRY_ASSIGN(tfrecord_reader reader, open(path, opts));
  AF_TRY(reader.impl_->skip_to(pos));
  return reader;
}

expected<std::optional<tfrecord_record_view>> tfrecord_reader::next_view() {
  tfrecord_record_view view;
  AF_TRY_ASSIGN(bool more, impl_->read_next(view));
  if (!more) return std::optional<tfrecord_record_view>{};
  return std::optional<tfrecord_record_view>{view};
}

expected<bool> tfrecord_reader::next(tfrecord_record& out) {
  tfrecord_record_view view;
  AF_TRY_ASSIGN(bool more, impl_->read_next(view));
  if (!more) return false;
  out.data.assign(view.data);
  out.index = view.index;
  out.offset = view.offset;
  return true;
}

expected<std::optional<tfrecord_record>> tfrecord_reader::next() {
  tfrecord_record record;
  AF_TRY_ASSIGN(bool more, next(record));
  if (!more) return std::optional<tfrecord_record>{};
  return std::optional<tfrecord_record>{std::move(record)};
}

tfrecord_position tfrecord_reader::position() const noexcept { return {impl_->index, impl_->offset}; }
const std::string& tfrecord_reader::path() const noexcept { return impl_->path; }

}  // namespace af
