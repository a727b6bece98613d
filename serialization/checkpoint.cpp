#include "serialization/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <system_error>

#include "serialization/crc32c.hpp"
#include "serialization/write_fully.hpp"

namespace af::ckpt {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view index_magic = "AFCKIDX1";
constexpr std::string_view metadata_magic = "AFCKMET1";
constexpr uint64_t data_alignment = 64;  // lets a later reader mmap the data file and use it in place
constexpr int max_ndim = 64;             // a bound for corrupt input, far above any real tensor

// -- small helpers ---------------------------------------------------------------------------------

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

error os_error(const std::string& what, const std::string& path) {
  return make_error(errc::io_error, "checkpoint: " + what + " " + in_quotes(path) + ": " + std::strerror(errno));
}
error fs_error(const std::string& what, const std::string& path, const std::error_code& ec) {
  return make_error(errc::io_error, "checkpoint: " + what + " " + in_quotes(path) + ": " + ec.message());
}
error corrupt(const std::string& file, const std::string& what) {
  return make_error(errc::malformed_input, "checkpoint file " + in_quotes(file) + ": " + what);
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

/// Reads little-endian fields from a byte string; callers check has() first.
struct cursor {
  std::string_view bytes;
  std::size_t pos = 0;

  bool has(uint64_t n) const noexcept { return bytes.size() - pos >= n; }
  uint64_t uint(int width) noexcept {
    uint64_t v = 0;
    for (int i = 0; i < width; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[pos + i])} << (8 * i);
    pos += static_cast<std::size_t>(width);
    return v;
  }
  std::string_view take(std::size_t n) noexcept {
    auto s = bytes.substr(pos, n);
    pos += n;
    return s;
  }
};

// -- files -----------------------------------------------------------------------------------------

/// An fd closed on every path out.
struct file_handle {
  int fd = -1;
  explicit file_handle(int f) : fd(f) {}
  ~file_handle() { if (fd >= 0) ::close(fd); }
  file_handle(const file_handle&) = delete;
  file_handle& operator=(const file_handle&) = delete;
};

expected<void> write_all(int fd, const void* data, std::size_t n, const std::string& path) {
  if (!io::write_fully(fd, data, n)) return os_error("cannot write", path);
  return {};
}

/// Reads exactly `n` bytes at `offset`; a short read means the file shrank under us.
expected<void> read_at(int fd, void* data, std::size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return os_error("cannot read", path);
    }
    if (r == 0) return corrupt(path, std::string{"ends early at byte "} + std::to_string(offset));
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return {};
}

/// Fsyncs and closes a written file: the data must be durable before the rename publishes it.
expected<void> sync_close(file_handle& f, const std::string& path) {
  if (::fsync(f.fd) != 0) return os_error("cannot fsync", path);
  int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) return os_error("cannot close", path);
  return {};
}

expected<void> write_file(const std::string& path, std::string_view bytes) {
  file_handle f(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (f.fd < 0) return os_error("cannot create", path);
  AF_TRY(write_all(f.fd, bytes.data(), bytes.size(), path));
  return sync_close(f, path);
}

/// A directory's entries (names after a rename) are durable only once the directory is fsynced.
expected<void> sync_dir(const std::string& path) {
  file_handle f(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (f.fd < 0) return os_error("cannot open directory", path);
  if (::fsync(f.fd) != 0) return os_error("cannot fsync directory", path);
  return {};
}

expected<std::string> read_small_file(const std::string& path) {
  file_handle f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) return os_error("cannot open", path);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return os_error("cannot stat", path);
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  AF_TRY(read_at(f.fd, bytes.data(), bytes.size(), 0, path));
  return bytes;
}

/// A directory's entries; errors instead of the exceptions of a range-for over directory_iterator.
expected<std::vector<fs::directory_entry>> list_dir(const std::string& path) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  for (; !ec && it != fs::directory_iterator{}; it.increment(ec)) out.push_back(*it);
  if (ec) return fs_error("cannot list", path, ec);
  return out;
}

// -- atomic directory replacement ------------------------------------------------------------------

std::atomic<uint64_t> sibling_counter{0};

std::string sibling_name(const std::string& dir, const char* kind) {
  return dir + "." + kind + "-" + std::to_string(::getpid()) + "-" + std::to_string(sibling_counter++);
}

/// `<dir>` with trailing slashes removed, so that `<dir>.tmp-...` is a sibling and not a child.
std::string normalized(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

std::string parent_of(const std::string& dir) {
  fs::path parent = fs::path(dir).parent_path();
  return parent.empty() ? std::string{"."} : parent.string();
}

/// Swaps `tmp` into `dir`, atomically where the OS can; afterwards `old` (when set) names the
/// previous checkpoint, still to be removed.
expected<void> install(const std::string& tmp, const std::string& dir, std::string& old) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return os_error("cannot stat", dir);
    if (::rename(tmp.c_str(), dir.c_str()) != 0) return os_error("cannot rename into place", dir);
    return {};
  }
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    old = tmp;  // after the swap the temporary name holds the previous checkpoint
    return {};
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return os_error("cannot swap into place", dir);
#endif
  // No atomic swap on this file system: for a moment `dir` is missing and load() reads `.old-*`.
  old = sibling_name(dir, "old");
  if (::rename(dir.c_str(), old.c_str()) != 0) {
    old.clear();
    return os_error("cannot rename away", dir);
  }
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    auto err = os_error("cannot rename into place", dir);
    if (::rename(old.c_str(), dir.c_str()) == 0) old.clear();  // put the previous one back
    return err;
  }
  return {};
}

/// True for `<name>.<kind>-<pid>-...` siblings whose writing process no longer exists.
bool is_stale_sibling(const std::string& entry, const std::string& name, std::string_view kind) {
  const std::string prefix = name + "." + std::string{kind} + "-";
  if (entry.compare(0, prefix.size(), prefix) != 0) return false;
  long pid = 0;
  const char* first = entry.data() + prefix.size();
  const char* last = entry.data() + entry.size();
  auto [end, ec] = std::from_chars(first, last, pid);
  if (ec != std::errc{} || end == first || end == last || *end != '-' || pid <= 0) return false;
  if (pid == ::getpid()) return false;  // maybe another thread's save in flight
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

void remove_stale_siblings(const std::string& dir) {
  const std::string name = fs::path(dir).filename().string();
  auto entries = list_dir(parent_of(dir));
  if (!entries) return;  // only housekeeping
  std::error_code ec;
  for (const auto& entry : *entries) {
    const std::string e = entry.path().filename().string();
    if (is_stale_sibling(e, name, "tmp") || is_stale_sibling(e, name, "old")) fs::remove_all(entry.path(), ec);
  }
}

/// The newest complete `<dir>.old-*` (see the header): the previous checkpoint of an interrupted
/// replacement. Empty when none.
std::string newest_old_sibling(const std::string& dir) {
  const std::string prefix = fs::path(dir).filename().string() + ".old-";
  std::string best;
  fs::file_time_type best_time{};
  auto entries = list_dir(parent_of(dir));
  if (!entries) return best;
  std::error_code ec;
  for (const auto& entry : *entries) {
    if (entry.path().filename().string().rfind(prefix, 0) != 0 || !entry.is_directory(ec)) continue;
    auto t = fs::last_write_time(entry.path(), ec);
    if (ec) continue;
    if (best.empty() || t > best_time) best = entry.path().string(), best_time = t;
  }
  return best;
}

bool has_checkpoint_files(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "index", ec) && fs::is_regular_file(dir / "data", ec) &&
         fs::is_regular_file(dir / "metadata", ec);
}

// -- encoding --------------------------------------------------------------------------------------

std::string encode_metadata(const checkpoint& ck) {
  std::string out{metadata_magic};
  put_u32(out, static_cast<uint32_t>(ck.metadata.size()));
  for (const auto& [key, value] : ck.metadata) {
    put_u64(out, key.size());
    out += key;
    put_u64(out, value.size());
    out += value;
  }
  put_u32(out, crc32c(out.data(), out.size()));
  return out;
}

expected<void> write_checkpoint_files(const std::string& tmp, const checkpoint& ck) {
  // Validate and lay out everything before the first byte is written.
  std::vector<tensor> bodies;
  bodies.reserve(ck.tensors.size());
  for (std::size_t i = 0; i < ck.tensors.size(); ++i) {
    const auto& [name, value] = ck.tensors[i];
    if (!value.defined()) return make_error(errc::invalid_argument, "checkpoint: tensor '" + name + "' is undefined");
    if (!value.dev().is_cpu())
      return make_error(errc::unsupported, "checkpoint: tensor '" + name + "' is on " + to_string(value.dev()) +
                                               "; copy it to the CPU first");
    if (value.ndim() > max_ndim) return make_error(errc::invalid_argument, "checkpoint: tensor '" + name + "' has too many dimensions");
    if (is_string(value.type()))
      return make_error(errc::unsupported, "checkpoint: tensor '" + name + "' holds strings; checkpoints hold numbers");
    for (std::size_t j = 0; j < i; ++j)
      if (ck.tensors[j].name == name) return make_error(errc::invalid_argument, "checkpoint: tensor name '" + name + "' repeats");
    AF_TRY_ASSIGN(tensor body, value.contiguous());
    bodies.push_back(std::move(body));
  }

  std::string index{index_magic};
  put_u32(index, static_cast<uint32_t>(bodies.size()));
  const std::size_t data_bytes_at = index.size();
  put_u64(index, 0);  // data_bytes, patched below
  uint64_t offset = 0;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    const tensor& t = bodies[i];
    offset = (offset + data_alignment - 1) / data_alignment * data_alignment;
    put_u32(index, static_cast<uint32_t>(ck.tensors[i].name.size()));
    index += ck.tensors[i].name;
    index += static_cast<char>(t.type());
    index += static_cast<char>(t.ndim());
    for (int64_t d : t.shape()) put_u64(index, static_cast<uint64_t>(d));
    put_u64(index, offset);
    put_u64(index, t.nbytes());
    put_u32(index, t.nbytes() ? crc32c(t.raw_data(), t.nbytes()) : 0);
    offset += t.nbytes();
  }
  for (int i = 0; i < 8; ++i) index[data_bytes_at + i] = static_cast<char>((offset >> (8 * i)) & 0xff);
  put_u32(index, crc32c(index.data(), index.size()));

  const std::string data_path = tmp + "/data";
  file_handle f(::open(data_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (f.fd < 0) return os_error("cannot create", data_path);
  static constexpr char zeros[data_alignment] = {};
  uint64_t written = 0;
  for (const tensor& t : bodies) {
    uint64_t pad = (data_alignment - written % data_alignment) % data_alignment;
    AF_TRY(write_all(f.fd, zeros, pad, data_path));
    AF_TRY(write_all(f.fd, t.raw_data(), t.nbytes(), data_path));
    written += pad + t.nbytes();
  }
  AF_TRY(sync_close(f, data_path));
  AF_TRY(write_file(tmp + "/metadata", encode_metadata(ck)));
  // The index last: a directory with an index has everything it describes.
  AF_TRY(write_file(tmp + "/index", index));
  return sync_dir(tmp);
}

// -- decoding --------------------------------------------------------------------------------------

struct index_entry {
  std::string name;
  dtype type = dtype::f32;
  af::shape dims;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  uint32_t crc = 0;
};

/// Checks the framing shared by index and metadata: magic, minimum size, trailing CRC. Returns the
/// body between the magic and the CRC.
expected<std::string_view> check_frame(const std::string& path, std::string_view bytes, std::string_view magic,
                                       const char* what) {
  if (bytes.size() < magic.size() + 4)
    return corrupt(path, std::string{"truncated: "} + std::to_string(bytes.size()) + " bytes, too short for a " + what);
  if (bytes.substr(0, magic.size()) != magic)
    return corrupt(path, std::string{"bad header: not an actorflow checkpoint "} + what + " (wrong magic)");
  cursor tail{bytes, bytes.size() - 4};
  uint32_t stored = static_cast<uint32_t>(tail.uint(4));
  uint32_t computed = crc32c(bytes.data(), bytes.size() - 4);
  if (stored != computed)
    return corrupt(path, std::string{what} + " digest mismatch (truncated or corrupt file)");
  return bytes.substr(magic.size(), bytes.size() - magic.size() - 4);
}

expected<std::vector<index_entry>> parse_index(const std::string& path, std::string_view bytes, uint64_t& data_bytes) {
  AF_TRY_ASSIGN(std::string_view body, check_frame(path, bytes, index_magic, "index"));
  cursor c{body};
  if (!c.has(12)) return corrupt(path, "bad header: too short for the tensor count and data size");
  const uint64_t count = c.uint(4);
  data_bytes = c.uint(8);
  std::vector<index_entry> entries;
  // Names are unique, as save() makes them: with a name twice, find() would hide one tensor.
  std::map<std::string_view, uint64_t> entry_of_name;  // views into `bytes`
  for (uint64_t i = 0; i < count; ++i) {
    const std::string which = std::string{"entry "} + std::to_string(i);
    index_entry e;
    if (!c.has(4)) return corrupt(path, which + ": truncated before its name");
    const uint64_t name_len = c.uint(4);
    if (!c.has(name_len + 2)) return corrupt(path, which + ": truncated inside its name");
    const std::string_view name = c.take(static_cast<std::size_t>(name_len));
    e.name = std::string{name};
    const std::string tensor_name = "tensor '" + e.name + "' (" + which + ")";
    if (auto [first, fresh] = entry_of_name.emplace(name, i); !fresh)
      return corrupt(path, tensor_name + ": the name of entry " + std::to_string(first->second) + " again");
    auto type = dtype_from_code(static_cast<uint32_t>(c.uint(1)));
    if (!type) return corrupt(path, tensor_name + ": " + type.error_value().message);
    e.type = *type;
    const uint64_t ndim = c.uint(1);
    if (ndim > max_ndim) return corrupt(path, tensor_name + ": " + std::to_string(ndim) + " dimensions");
    if (!c.has(ndim * 8 + 20)) return corrupt(path, tensor_name + ": truncated");
    // The byte size, bounded by 2^62 at every step (the element size included: [2^61] of f64 must
    // not wrap around to 0 bytes), so that numel and nbytes of the tensor never overflow either.
    uint64_t byte_size = size_of(e.type);
    bool too_big = false;
    for (uint64_t d = 0; d < ndim; ++d) {
      const auto dim = static_cast<int64_t>(c.uint(8));
      if (dim < 0) return corrupt(path, tensor_name + ": negative dimension " + std::to_string(dim));
      e.dims.push_back(dim);
      if (dim != 0 && byte_size > (uint64_t{1} << 62) / static_cast<uint64_t>(dim)) too_big = true;
      byte_size *= static_cast<uint64_t>(dim);
    }
    e.offset = c.uint(8);
    e.nbytes = c.uint(8);
    e.crc = static_cast<uint32_t>(c.uint(4));
    if (too_big)
      return corrupt(path, tensor_name + ": shape " + to_string(e.dims) + " of " + std::string{to_string(e.type)} +
                               " is too large (over 2^62 bytes)");
    if (byte_size != e.nbytes)
      return corrupt(path, tensor_name + ": shape " + to_string(e.dims) + " of " + std::string{to_string(e.type)} +
                               " does not match its byte length " + std::to_string(e.nbytes));
    if (e.offset > data_bytes || e.nbytes > data_bytes - e.offset)
      return corrupt(path, tensor_name + ": bytes " + std::to_string(e.offset) + "+" + std::to_string(e.nbytes) +
                               " lie outside the data (" + std::to_string(data_bytes) + " bytes)");
    entries.push_back(std::move(e));
  }
  if (c.pos != body.size()) return corrupt(path, std::string{"bad header: "} + std::to_string(body.size() - c.pos) + " stray bytes after the last entry");
  return entries;
}

expected<std::vector<std::pair<std::string, std::string>>> parse_metadata(const std::string& path, std::string_view bytes) {
  AF_TRY_ASSIGN(std::string_view body, check_frame(path, bytes, metadata_magic, "metadata"));
  cursor c{body};
  if (!c.has(4)) return corrupt(path, "bad header: too short for the entry count");
  const uint64_t count = c.uint(4);
  std::vector<std::pair<std::string, std::string>> out;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string which = std::string{"metadata entry "} + std::to_string(i);
    if (!c.has(8)) return corrupt(path, which + ": truncated before its key");
    uint64_t n = c.uint(8);
    if (!c.has(n)) return corrupt(path, which + ": truncated inside its key");
    std::string key{c.take(static_cast<std::size_t>(n))};
    if (!c.has(8)) return corrupt(path, which + " ('" + key + "'): truncated before its value");
    n = c.uint(8);
    if (!c.has(n)) return corrupt(path, which + " ('" + key + "'): truncated inside its value");
    out.emplace_back(std::move(key), std::string{c.take(static_cast<std::size_t>(n))});
  }
  if (c.pos != body.size()) return corrupt(path, "bad header: stray bytes after the last entry");
  return out;
}

/// Parses `ckpt-<digits>` (or, with `old`, `ckpt-<digits>.old-...`); -1 when the name is neither.
int64_t step_of(const std::string& name, bool& old) {
  constexpr std::string_view prefix = "ckpt-";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  if (first == last || *first < '0' || *first > '9') return -1;
  int64_t step = -1;
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc{}) return -1;
  old = end != last;
  if (old && std::string_view(end, static_cast<std::size_t>(last - end)).rfind(".old-", 0) != 0) return -1;
  return step;
}

}  // namespace

// -- public API ------------------------------------------------------------------------------------

const tensor* checkpoint::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t.value;
  return nullptr;
}

const std::string* checkpoint::meta(std::string_view key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

expected<void> save(const std::string& dir_arg, const checkpoint& ck) {
  const std::string dir = normalized(dir_arg);
  const std::string parent = parent_of(dir);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return fs_error("cannot create directory", parent, ec);

  const std::string tmp = sibling_name(dir, "tmp");
  if (::mkdir(tmp.c_str(), 0755) != 0) return os_error("cannot create directory", tmp);
  std::string old;
  auto done = write_checkpoint_files(tmp, ck);
  if (done) done = install(tmp, dir, old);
  if (!done) {
    // Nothing was published: the temporary holds only the new files (install restored the old).
    fs::remove_all(tmp, ec);
    return done;
  }
  done = sync_dir(parent);
  if (!old.empty()) fs::remove_all(old, ec);
  if (!done) return done;
  remove_stale_siblings(dir);
  return {};
}

namespace {

// What load() and load_mapped() check before the tensors' bytes: index, metadata, the data file's
// size. The data file is left open.
struct opened_checkpoint {
  std::string data_path;
  std::vector<index_entry> entries;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::unique_ptr<file_handle> data;
  uint64_t data_bytes = 0;
};

expected<opened_checkpoint> open_checkpoint(const std::string& dir) {
  opened_checkpoint out;
  const std::string index_path = dir + "/index";
  const std::string metadata_path = dir + "/metadata";
  out.data_path = dir + "/data";
  AF_TRY_ASSIGN(std::string index_bytes, read_small_file(index_path));
  AF_TRY_ASSIGN(out.entries, parse_index(index_path, index_bytes, out.data_bytes));
  AF_TRY_ASSIGN(std::string metadata_bytes, read_small_file(metadata_path));
  AF_TRY_ASSIGN(out.metadata, parse_metadata(metadata_path, metadata_bytes));
  out.data = std::make_unique<file_handle>(::open(out.data_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (out.data->fd < 0) return os_error("cannot open", out.data_path);
  struct stat st {};
  if (::fstat(out.data->fd, &st) != 0) return os_error("cannot stat", out.data_path);
  if (static_cast<uint64_t>(st.st_size) != out.data_bytes)
    return corrupt(out.data_path, std::string{"is "} + std::to_string(st.st_size) + " bytes, the index expects " +
                                      std::to_string(out.data_bytes) +
                                      (static_cast<uint64_t>(st.st_size) < out.data_bytes ? " (truncated)" : ""));
  return out;
}

}  // namespace

expected<checkpoint> load(const std::string& dir_arg) {
  std::string dir = normalized(dir_arg);
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    std::string old = newest_old_sibling(dir);
    if (old.empty()) return make_error(errc::io_error, "checkpoint: directory " + in_quotes(dir) + " does not exist");
    dir = old;
  }
  AF_TRY_ASSIGN(auto opened, open_checkpoint(dir));
  checkpoint ck;
  ck.metadata = std::move(opened.metadata);
  for (const index_entry& e : opened.entries) {
    auto t = tensor::empty(e.dims, e.type);
    if (!t) return with_context(t.error_value(), "checkpoint file " + in_quotes(opened.data_path) + ": tensor '" + e.name + "'");
    if (e.nbytes > 0) AF_TRY(read_at(opened.data->fd, t->raw_data(), e.nbytes, e.offset, opened.data_path));
    const uint32_t crc = e.nbytes ? crc32c(t->raw_data(), e.nbytes) : 0;
    if (crc != e.crc) return corrupt(opened.data_path, "tensor '" + e.name + "': digest mismatch (corrupt data)");
    ck.tensors.push_back({e.name, std::move(*t)});
  }
  return ck;
}

expected<mapped_checkpoint> load_mapped(const std::string& dir_arg) {
  const std::string dir = normalized(dir_arg);
  AF_TRY_ASSIGN(auto opened, open_checkpoint(dir));
  mapped_checkpoint out;
  out.data_path = opened.data_path;
  out.ck.metadata = std::move(opened.metadata);
  std::shared_ptr<void> mapping;
  if (opened.data_bytes > 0) {
    void* base = ::mmap(nullptr, opened.data_bytes, PROT_READ, MAP_PRIVATE, opened.data->fd, 0);
    if (base == MAP_FAILED) return os_error("cannot map", opened.data_path);
    const std::size_t length = opened.data_bytes;
    mapping = std::shared_ptr<void>(base, [length](void* p) { ::munmap(p, length); });
  }
  for (const index_entry& e : opened.entries) {
    // Each tensor is a view of the mapping; its storage keeps the whole mapping alive.
    char* bytes = e.nbytes ? static_cast<char*>(mapping.get()) + e.offset : nullptr;
    auto buf = std::make_shared<storage>(bytes, e.nbytes, device::cpu(), [mapping](void*) {});
    tensor t{e.type, e.dims, contiguous_strides(e.dims), 0, std::move(buf)};
    out.ck.tensors.push_back({e.name, std::move(t)});
    out.digests.push_back(e.crc);
  }
  return out;
}

expected<void> verify_digests(const mapped_checkpoint& mapped) {
  for (std::size_t i = 0; i < mapped.ck.tensors.size(); ++i) {
    const auto& [name, t] = mapped.ck.tensors[i];
    const uint32_t crc = t.nbytes() ? crc32c(t.raw_data(), static_cast<std::size_t>(t.nbytes())) : 0;
    if (crc != mapped.digests[i]) return corrupt(mapped.data_path, "tensor '" + name + "': digest mismatch (corrupt data)");
  }
  return {};
}

expected<std::string> save_numbered(const std::string& base, int64_t step, const checkpoint& ck, int keep_last) {
  if (step < 0) return make_error(errc::invalid_argument, std::string{"checkpoint: negative step "} + std::to_string(step));
  const std::string dir = (fs::path(normalized(base)) / (std::string{"ckpt-"} + std::to_string(step))).string();
  AF_TRY(save(dir, ck));
  if (keep_last <= 0) return dir;

  std::map<int64_t, std::vector<fs::path>, std::greater<>> by_step;  // newest first
  std::error_code ec;
  AF_TRY_ASSIGN(auto entries, list_dir(normalized(base)));
  for (const auto& entry : entries) {
    bool old = false;
    const int64_t s = step_of(entry.path().filename().string(), old);
    if (s >= 0 && entry.is_directory(ec)) by_step[s].push_back(entry.path());
  }
  int kept = 0;
  for (auto& [s, paths] : by_step) {
    if (kept++ < keep_last) continue;
    for (const auto& p : paths) {
      fs::remove_all(p, ec);
      if (ec) return fs_error("cannot remove old checkpoint", p.string(), ec);
    }
  }
  return dir;
}

expected<std::optional<std::string>> latest(const std::string& base_arg) {
  const std::string base = normalized(base_arg);
  std::error_code ec;
  if (!fs::exists(base, ec)) return std::optional<std::string>{};
  int64_t best = -1;
  std::string best_name;
  AF_TRY_ASSIGN(auto entries, list_dir(base));
  for (const auto& entry : entries) {
    bool old = false;
    const std::string name = entry.path().filename().string();
    const int64_t s = step_of(name, old);
    if (s <= best || !entry.is_directory(ec) || !has_checkpoint_files(entry.path())) continue;
    // An `.old-*` stands in for its step only while the real directory is missing (as in load).
    const std::string main_name = old ? name.substr(0, name.find(".old-")) : name;
    if (old && fs::exists(fs::path(base) / main_name, ec)) continue;
    best = s;
    best_name = main_name;
  }
  if (best < 0) return std::optional<std::string>{};
  return std::optional<std::string>{(fs::path(base) / best_name).string()};
}

}  // namespace af::ckpt
