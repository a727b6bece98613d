#pragma once

// Helpers shared by the libFuzzer targets of tests/fuzz/: files in memory for readers that take a
// path, a check that stops the fuzzer with a description, and splitting of the fuzz input.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <zlib.h>

#include "ops/error.hpp"

namespace af::fuzz {

/// A broken invariant: prints what and aborts, which libFuzzer reports as a crash with the input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace af::fuzz

/// Fails with `what` (any expression giving a string) when `cond` is false; `what` is evaluated
/// only then, so checks cost nothing on the fuzzer's hot path.
#define AF_FUZZ_CHECK(cond, what)        \
  do {                                   \
    if (!(cond)) ::af::fuzz::fail(what); \
  } while (false)

namespace af::fuzz {

/// An error that a parser of untrusted bytes may return: malformed_input (bad bytes) or io_error
/// (the OS refused), each with a message saying what and where. Anything else is a bug.
inline void check_parse_error(const error& e, const char* who) {
  AF_FUZZ_CHECK(e.code == errc::malformed_input || e.code == errc::io_error,
        std::string(who) + " failed with an unexpected error code: " + e.to_string());
  AF_FUZZ_CHECK(!e.message.empty(), std::string(who) + " failed with an empty message");
}

/// A regular file that lives in memory (memfd): one per process, rewritten for each input, opened
/// by the code under test through `path()` as if it were on disk.
class memory_file {
 public:
  memory_file() {
    fd_ = ::memfd_create("af_fuzz", MFD_CLOEXEC);
    if (fd_ < 0) fail("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  memory_file(const memory_file&) = delete;
  memory_file& operator=(const memory_file&) = delete;

  const std::string& path() const noexcept { return path_; }

  void assign(std::string_view bytes) {
    if (::ftruncate(fd_, 0) != 0) fail("ftruncate of the memory file failed");
    std::size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n <= 0) fail("write to the memory file failed");
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_ = -1;
  std::string path_;
};

/// Consumes the fuzz input front to back; reads past the end give zeros, so every input is usable.
struct input_reader {
  std::string_view rest;

  uint8_t byte() {
    if (rest.empty()) return 0;
    auto b = static_cast<uint8_t>(rest.front());
    rest.remove_prefix(1);
    return b;
  }
  uint64_t uint(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{byte()} << (8 * i);
    return v;
  }
  std::string_view take(std::size_t n) {
    n = std::min(n, rest.size());
    auto out = rest.substr(0, n);
    rest.remove_prefix(n);
    return out;
  }
};

/// Pieces of `bytes` between occurrences of `separator` (a separator-delimited list mutates well:
/// inserting or deleting bytes never shifts the meaning of the other pieces).
inline std::vector<std::string_view> split(std::string_view bytes, std::string_view separator) {
  std::vector<std::string_view> out;
  for (;;) {
    auto at = bytes.find(separator);
    out.push_back(bytes.substr(0, at));
    if (at == std::string_view::npos) return out;
    bytes.remove_prefix(at + separator.size());
  }
}

/// Same bits (NaN payloads and signed zeros count): what a parser must preserve.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// `bytes` compressed as one gzip (`gzip` true) or zlib stream, as tfrecord_writer and gzip(1) make.
inline std::string compress(std::string_view bytes, bool gzip) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, gzip ? 16 + MAX_WBITS : MAX_WBITS, 9,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    fail("deflateInit2 failed");
  std::string out(deflateBound(&zs, static_cast<uLong>(bytes.size())), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) fail("deflate did not finish in deflateBound bytes");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline std::string_view as_chars(const uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace af::fuzz
