// Fuzzes ckpt::load, the reader of a checkpoint directory (index, metadata and data files).
//
// Input: a mode byte, u16 LE index size, u16 LE metadata size, the index file, the metadata file,
// and the rest as the data file. Mode bits (so that mutations get past the digests and the size
// check and reach the parsing behind them):
//   bit 0  recompute the index's trailing CRC32C      bit 1  recompute the metadata's
//   bit 2  set the index's data_bytes field to the data file's size (before bit 0's CRC)
//   bit 3  leave the data file out   bit 4  leave the metadata file out   bit 5  leave the index out
// Invariants: an error is malformed_input/io_error naming a file of the checkpoint; a checkpoint
// that loads saves again (ckpt::save) and loads back with the same tensors (bit for bit) and
// metadata.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz_support.hpp"
#include "serialization/checkpoint.hpp"
#include "serialization/crc32c.hpp"

namespace {

namespace fs = std::filesystem;
using af::fuzz::fail;

constexpr std::string_view scratch_prefix = "af_fuzz_checkpoint_";

// libFuzzer ends a run with _Exit (and a crash, the point of fuzzing, ends it anyway), so no
// cleanup at exit: the next run removes the directories of processes that are gone.
void remove_stale_scratch(const fs::path& base) {
  std::error_code ec;
  for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(scratch_prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + scratch_prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }
}

// A directory of its own per process, on tmpfs when there is one: three files per input.
const fs::path& scratch_root() {
  static const fs::path root = [] {
    std::error_code ec;
    fs::path base = fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                        ? fs::path("/dev/shm")
                        : fs::temp_directory_path();
    remove_stale_scratch(base);
    fs::path dir = base / (std::string(scratch_prefix) + std::to_string(::getpid()));
    fs::create_directories(dir / "ckpt", ec);
    if (ec) fail("cannot create the scratch directory " + dir.string() + ": " + ec.message());
    return dir;
  }();
  return root;
}

void put_file(const fs::path& path, std::string_view bytes, bool present) {
  if (!present) {
    ::unlink(path.c_str());
    return;
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create " + path.string());
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) fail("cannot write " + path.string());
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

void put_u32(std::string& bytes, std::size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
}

void fix_trailing_crc(std::string& bytes) {
  if (bytes.size() >= 4) put_u32(bytes, bytes.size() - 4, af::crc32c(bytes.data(), bytes.size() - 4));
}

// A loaded tensor must own the bytes its shape describes: numel * size_of(dtype), without overflow.
void check_backed(const af::ckpt::checkpoint& ck) {
  for (const auto& [name, t] : ck.tensors) {
    uint64_t bytes = af::size_of(t.type());
    for (int64_t d : t.shape())
      AF_FUZZ_CHECK(d >= 0 && !__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes),
            "tensor '" + name + "' of shape " + af::to_string(t.shape()) + " loaded: its size overflows");
    AF_FUZZ_CHECK(bytes == t.nbytes(), "tensor '" + name + "' of shape " + af::to_string(t.shape()) + " loaded with " +
                                   std::to_string(t.nbytes()) + " bytes, its shape needs " + std::to_string(bytes));
    AF_FUZZ_CHECK(t.buffer() != nullptr && (bytes == 0 || t.buffer()->nbytes() >= bytes),
          "tensor '" + name + "' loaded without storage for its bytes");
  }
}

bool same_checkpoint(const af::ckpt::checkpoint& a, const af::ckpt::checkpoint& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const af::tensor& x = a.tensors[i].value;
    const af::tensor& y = b.tensors[i].value;
    if (a.tensors[i].name != b.tensors[i].name || x.type() != y.type() || x.shape() != y.shape() ||
        (x.nbytes() > 0 && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0))
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  af::fuzz::input_reader in{af::fuzz::as_chars(data, size)};
  const uint8_t mode = in.byte();
  const std::size_t index_size = in.uint(2);
  const std::size_t metadata_size = in.uint(2);
  std::string index(in.take(index_size));
  std::string metadata(in.take(metadata_size));
  const std::string_view body = in.rest;

  if ((mode & 0x04) && index.size() >= 20)  // "AFCKIDX1" | u32 count | u64 data_bytes
    for (int i = 0; i < 8; ++i) index[12 + i] = static_cast<char>(uint64_t{body.size()} >> (8 * i));
  if (mode & 0x01) fix_trailing_crc(index);
  if (mode & 0x02) fix_trailing_crc(metadata);

  const fs::path dir = scratch_root() / "ckpt";
  put_file(dir / "index", index, !(mode & 0x20));
  put_file(dir / "metadata", metadata, !(mode & 0x10));
  put_file(dir / "data", body, !(mode & 0x08));

  auto loaded = af::ckpt::load(dir.string());
  if (!loaded) {
    af::fuzz::check_parse_error(loaded.error_value(), "ckpt::load");
    AF_FUZZ_CHECK(loaded.error_value().message.find(dir.string()) != std::string::npos,
          "ckpt::load's error names no file of the checkpoint: " + loaded.error_value().message);
    return 0;
  }
  check_backed(*loaded);
  const fs::path copy = scratch_root() / "copy";
  if (auto saved = af::ckpt::save(copy.string(), *loaded); !saved)
    fail("a loaded checkpoint does not save: " + saved.error_value().to_string());
  auto reloaded = af::ckpt::load(copy.string());
  if (!reloaded) fail("a re-saved checkpoint does not load: " + reloaded.error_value().to_string());
  AF_FUZZ_CHECK(same_checkpoint(*loaded, *reloaded), "a checkpoint saved again loads with other contents");
  return 0;
}
