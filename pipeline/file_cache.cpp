// cache(path): the first complete pass is streamed into a file, later passes read the file.
//
// The file is a TFRecord file (so CRCs guard every record):
//   record 0        header: "actorflow-cache" (15 bytes), u32 format version, u32 n + n bytes of
//                   the input's description (informational: a changed lambda keeps its label)
//   record 1..N     one element: u8 'E', u32 field count, then per field: u32 n + n bytes name,
//                   u8 dtype code (255: undefined tensor), u8 rank, rank x i64 dims, u64 n + n
//                   payload bytes (row-major, contiguous); then u8 has_origin and, if 1, u32 n +
//                   n bytes file, i64 record, i64 offset
//   record N+1      end: u8 'Z', u64 element count (a file cut at a record boundary lacks it)
// Integers are little-endian. The writer appends to "<path>.partial-<pid>-<random>" in the same
// directory and renames it to <path> (after fsync) only when upstream ended cleanly; a pass cut
// short deletes its partial file, and a crashed writer leaves only a partial file, never read.

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "pipeline/node.hpp"
#include "serialization/tfrecord.hpp"

namespace af::data {

namespace {

static_assert(std::endian::native == std::endian::little, "the cache format is written as in memory");

constexpr std::string_view cache_magic = "actorflow-cache";
constexpr uint32_t cache_version = 1;
constexpr char element_kind = 'E';
constexpr char end_kind = 'Z';
constexpr uint8_t undefined_dtype = 255;

std::string os_error(const std::string& what, const std::string& path) {
  return "cache: " + what + " '" + path + "': " + std::strerror(errno);
}

// The input's description, stored in the header for whoever inspects the file.
std::string describe(const node& n) {
  std::string out = n.label();
  for (const node* in : n.inputs()) out = describe(*in) + " -> " + out;
  return out;
}

// -- encoding ------------------------------------------------------------------------------------

template <class T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

std::string encode_header(const std::string& description) {
  std::string out{cache_magic};
  put<uint32_t>(out, cache_version);
  put_string(out, description);
  return out;
}

// Appends the element's record payload to `out` (one copy of each tensor's bytes).
expected<void> encode_element(const element& e, std::string& out) {
  out.push_back(element_kind);
  put<uint32_t>(out, static_cast<uint32_t>(e.fields.size()));
  for (const auto& f : e.fields) {
    put_string(out, f.name);
    if (!f.value.defined()) {
      put<uint8_t>(out, undefined_dtype);
      continue;
    }
    if (!f.value.dev().is_cpu())
      return make_error(errc::unsupported, "cache: field '" + f.name + "' is not on the CPU (only CPU tensors are cached)");
    if (is_string(f.value.type()))
      return make_error(errc::unsupported, "cache: field '" + f.name + "' holds strings, which the cache does not store yet");
    AF_TRY_ASSIGN(tensor dense, f.value.contiguous());
    put<uint8_t>(out, static_cast<uint8_t>(dense.type()));
    put<uint8_t>(out, static_cast<uint8_t>(dense.ndim()));
    for (int64_t d : dense.shape()) put<int64_t>(out, d);
    put<uint64_t>(out, dense.nbytes());
    if (dense.nbytes() > 0) out.append(static_cast<const char*>(dense.raw_data()), dense.nbytes());
  }
  put<uint8_t>(out, e.origin.known() ? 1 : 0);
  if (e.origin.known()) {
    put_string(out, *e.origin.file);
    put<int64_t>(out, e.origin.record);
    put<int64_t>(out, e.origin.offset);
  }
  return {};
}

// -- decoding ------------------------------------------------------------------------------------

// Reads one record's payload; every failure names the file, record index and offset.
class record_parser {
 public:
  record_parser(const std::string& path, const tfrecord_record_view& r) : path_(path), rec_(r) {}

  error bad(const std::string& what) const {
    return make_error(errc::malformed_input, "cache file '" + path_ + "': record " + std::to_string(rec_.index) +
                                                 " at offset " + std::to_string(rec_.offset) + ": " + what);
  }
  template <class T>
  expected<T> get(const char* what) {
    if (rest() < sizeof(T)) return bad(std::string{"truncated "} + what);
    T value;
    std::memcpy(&value, rec_.data.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  expected<std::string_view> bytes(uint64_t n, const char* what) {
    if (rest() < n) return bad(std::string{"truncated "} + what + " (needs " + std::to_string(n) + " bytes, has " +
                               std::to_string(rest()) + ")");
    std::string_view out = rec_.data.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  expected<std::string_view> string(const char* what) {
    AF_TRY_ASSIGN(uint32_t n, get<uint32_t>(what));
    return bytes(n, what);
  }
  std::size_t rest() const noexcept { return rec_.data.size() - pos_; }

 private:
  const std::string& path_;
  const tfrecord_record_view& rec_;
  std::size_t pos_ = 0;
};

expected<void> check_header(const std::string& path, const tfrecord_record_view& r) {
  record_parser p{path, r};
  auto magic = p.bytes(cache_magic.size(), "magic");
  if (!magic || *magic != cache_magic) return p.bad("not an actorflow cache file (bad magic)");
  AF_TRY_ASSIGN(uint32_t version, p.get<uint32_t>("format version"));
  if (version != cache_version)
    return p.bad("cache format version " + std::to_string(version) + ", this build reads version " +
                 std::to_string(cache_version));
  AF_TRY(p.string("description"));
  return {};
}

expected<element> decode_element(record_parser& p, const std::string*& last_file) {
  AF_TRY_ASSIGN(uint32_t count, p.get<uint32_t>("field count"));
  element e;
  for (uint32_t i = 0; i < count; ++i) {
    AF_TRY_ASSIGN(std::string_view name, p.string("field name"));
    AF_TRY_ASSIGN(uint8_t code, p.get<uint8_t>("dtype"));
    if (code == undefined_dtype) {
      e.fields.push_back({std::string{name}, tensor{}});
      continue;
    }
    auto type = dtype_from_code(code);
    if (!type) return p.bad("field '" + std::string{name} + "': " + type.error_value().message);
    AF_TRY_ASSIGN(uint8_t rank, p.get<uint8_t>("rank"));
    shape dims(rank);
    int64_t elements = 1;
    for (auto& d : dims) {
      AF_TRY_ASSIGN(d, p.get<int64_t>("dimension"));
      // The payload lies in this record, so elements x dims never exceeds its size (no overflow).
      if (d < 0 || (d > 0 && elements > static_cast<int64_t>(p.rest() / static_cast<uint64_t>(d))))
        return p.bad("field '" + std::string{name} + "': impossible shape");
      elements *= d;
    }
    AF_TRY_ASSIGN(uint64_t nbytes, p.get<uint64_t>("payload size"));
    if (nbytes != static_cast<uint64_t>(elements) * size_of(*type))
      return p.bad("field '" + std::string{name} + "': " + std::to_string(nbytes) + " payload bytes for " +
                   std::string{to_string(*type)} + " " + to_string(dims));
    AF_TRY_ASSIGN(std::string_view payload, p.bytes(nbytes, "payload"));
    AF_TRY_ASSIGN(tensor t, tensor::empty(dims, *type));
    if (nbytes > 0) std::memcpy(t.raw_data(), payload.data(), payload.size());
    e.fields.push_back({std::string{name}, std::move(t)});
  }
  AF_TRY_ASSIGN(uint8_t has_origin, p.get<uint8_t>("origin flag"));
  if (has_origin) {
    AF_TRY_ASSIGN(std::string_view file, p.string("origin file"));
    AF_TRY_ASSIGN(e.origin.record, p.get<int64_t>("origin record"));
    AF_TRY_ASSIGN(e.origin.offset, p.get<int64_t>("origin offset"));
    if (!last_file || *last_file != file) last_file = intern_origin_file(file);
    e.origin.file = last_file;
  }
  if (p.rest() != 0) return p.bad(std::to_string(p.rest()) + " unexpected bytes after the element");
  return e;
}

// Reads a complete cache file, checking header, every record and the end record.
class cache_reader {
 public:
  explicit cache_reader(std::string path) : path_(std::move(path)) {}

  expected<std::optional<element>> operator()() {
    if (done_) return std::optional<element>{};
    if (!reader_) {
      AF_TRY_ASSIGN(auto opened, tfrecord_reader::open(path_, {.compression = record_compression::none}));
      reader_.emplace(std::move(opened));
      AF_TRY_ASSIGN(auto header, next_record());
      if (!header) return make_error(errc::malformed_input, "cache file '" + path_ + "': empty (no header record)");
      AF_TRY(check_header(path_, *header));
    }
    AF_TRY_ASSIGN(auto r, next_record());
    if (!r)
      return make_error(errc::malformed_input,
                        "cache file '" + path_ + "': truncated: ends at record " + std::to_string(reader_->position().index) +
                            ", offset " + std::to_string(reader_->position().offset) + " after " +
                            std::to_string(read_) + " elements, without its end record");
    record_parser p{path_, *r};
    AF_TRY_ASSIGN(char kind, p.get<char>("record kind"));
    if (kind == end_kind) {
      AF_TRY_ASSIGN(uint64_t count, p.get<uint64_t>("element count"));
      if (count != read_) return p.bad("end record counts " + std::to_string(count) + " elements, file has " + std::to_string(read_));
      AF_TRY_ASSIGN(auto after, next_record());
      if (after) return make_error(errc::malformed_input, "cache file '" + path_ + "': record " +
                                                              std::to_string(after->index) + " at offset " +
                                                              std::to_string(after->offset) + ": data after the end record");
      done_ = true;
      reader_.reset();
      return std::optional<element>{};
    }
    if (kind != element_kind) return p.bad("unknown record kind " + std::to_string(static_cast<int>(kind)));
    AF_TRY_ASSIGN(element e, decode_element(p, last_file_));
    ++read_;
    return std::optional<element>{std::move(e)};
  }

 private:
  expected<std::optional<tfrecord_record_view>> next_record() {
    auto r = reader_->next_view();
    if (!r) return with_context(r.error_value(), "cache file");
    return r;
  }

  std::string path_;
  std::optional<tfrecord_reader> reader_;
  const std::string* last_file_ = nullptr;
  uint64_t read_ = 0;
  bool done_ = false;
};

// -- writing -------------------------------------------------------------------------------------

// Passes elements through while appending them to a partial file; renames it to the cache path
// only in finish() (upstream ended cleanly). Destroyed without finishing: deletes the partial file.
class file_cache_writer final : public stage_operator {
 public:
  file_cache_writer(std::string path, std::string description)
      : path_(std::move(path)), description_(std::move(description)) {}
  ~file_cache_writer() override {
    if (!writer_) return;
    (void)writer_->close();
    ::unlink(partial_.c_str());
  }

  expected<void> push(element input, std::vector<element>& out) override {
    AF_TRY(ensure_open());
    scratch_.clear();
    AF_TRY(encode_element(input, scratch_));
    AF_TRY(writer_->write(scratch_));
    ++written_;
    out.push_back(std::move(input));
    return {};
  }

  expected<void> finish(std::vector<element>&, std::size_t) override {
    if (committed_) return {};
    AF_TRY(ensure_open());
    scratch_.clear();
    scratch_.push_back(end_kind);
    put<uint64_t>(scratch_, written_);
    AF_TRY(writer_->write(scratch_));
    AF_TRY(writer_->close());
    AF_TRY(sync(partial_, O_RDONLY));
    if (::rename(partial_.c_str(), path_.c_str()) != 0)
      return make_error(errc::io_error, os_error("cannot rename '" + partial_ + "' to", path_));
    committed_ = true;
    writer_.reset();
    // The rename itself is durable once the directory is synced (best effort: some file systems refuse).
    (void)sync(std::filesystem::path{path_}.parent_path().empty() ? std::string{"."}
                                                                 : std::filesystem::path{path_}.parent_path().string(),
               O_RDONLY | O_DIRECTORY);
    scratch_ = std::string{};
    return {};
  }

 private:
  expected<void> ensure_open() {
    if (writer_) return {};
    std::ostringstream name;
    name << path_ << ".partial-" << ::getpid() << '-' << std::hex << random_seed();
    partial_ = name.str();
    AF_TRY_ASSIGN(auto opened, tfrecord_writer::open(partial_));
    writer_.emplace(std::move(opened));
    return writer_->write(encode_header(description_));
  }

  static expected<void> sync(const std::string& path, int flags) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) return make_error(errc::io_error, os_error("cannot open", path));
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) return make_error(errc::io_error, os_error("cannot fsync", path));
    return {};
  }

  std::string path_, description_, partial_;
  std::optional<tfrecord_writer> writer_;
  std::string scratch_;  // one record's payload, reused
  uint64_t written_ = 0;
  bool committed_ = false;
};

struct file_cache_node final : unary_node {
  std::string path;
  file_cache_node(std::shared_ptr<const node> in, std::string p) : unary_node(std::move(in)), path(std::move(p)) {}
  std::string label() const override { return "cache('" + path + "')"; }
  pipeline build(const build_context& ctx) const override {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      return pipeline::from_source(
          label(),
          [path = path] {
            auto reader = std::make_shared<cache_reader>(path);  // holds a move-only file reader
            return generator_fn{[reader] { return (*reader)(); }};
          },
          {.slots = element_slots, .detached = true});  // file reads block: their own thread
    }
    return input->build(ctx).apply(
        label(), [path = path, description = describe(*input)] {
          return std::make_unique<file_cache_writer>(path, description);
        },
        {.slots = element_slots, .detached = true});  // writes and fsync block: their own thread
  }
  pipeline extend(pipeline up, const build_context&) const override { return up; }
};

}  // namespace

dataset dataset::cache(std::string path) const {
  return dataset{std::make_shared<file_cache_node>(root_, std::move(path))};
}

}  // namespace af::data
