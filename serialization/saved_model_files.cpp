// SHA-256 (OpenSSL's, with the CPU's SHA extensions where present), the manifest, whole-file I/O.

#include "serialization/saved_model_files.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "serialization/saved_model.hpp"
#include "serialization/write_fully.hpp"

namespace af::saved_model {

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

namespace detail {

namespace {

error os_error(const char* what, const std::string& path) {
  return make_error(errc::io_error, std::string{what} + " '" + path + "': " + std::strerror(errno));
}

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

bool safe_relative_path(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return std::none_of(path.begin(), path.end(), [](char c) { return c == '\0' || c == '\n' || c == '\\'; });
}

}  // namespace

std::string render_manifest(std::vector<manifest_entry> entries) {
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  std::string out;
  for (const auto& e : entries) out += e.sha256 + "  " + e.path + "\n";
  return out;
}

expected<std::vector<manifest_entry>> parse_manifest(std::string_view text, const std::string& source) {
  std::vector<manifest_entry> out;
  std::set<std::string> seen;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const std::size_t end = text.find('\n');
    if (end == std::string_view::npos)
      return make_error(errc::malformed_input, source + ": line " + std::to_string(line_no) + " does not end (truncated file)");
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end + 1);
    const std::string where = source + ": line " + std::to_string(line_no);
    if (line.size() < 67 || line.substr(64, 2) != "  ")
      return make_error(errc::malformed_input, where + " is not '<sha256>  <path>'");
    const std::string_view digest = line.substr(0, 64);
    if (!std::all_of(digest.begin(), digest.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
      return make_error(errc::malformed_input, where + ": the digest is not 64 lowercase hex digits");
    const std::string path{line.substr(66)};
    if (!safe_relative_path(path))
      return make_error(errc::malformed_input, where + ": the path '" + path + "' is not a file inside the directory");
    if (!seen.insert(path).second) return make_error(errc::malformed_input, where + ": '" + path + "' is listed twice");
    out.push_back({path, std::string{digest}});
  }
  return out;
}

expected<std::string> read_file(const std::string& path) {
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return os_error("cannot open", path);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return os_error("cannot stat", path);
  if (!S_ISREG(st.st_mode)) return make_error(errc::io_error, "'" + path + "' is not a regular file");
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t r = ::read(f.fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return os_error("cannot read", path);
    if (r == 0) return make_error(errc::io_error, "'" + path + "' shrank while being read");
    done += static_cast<std::size_t>(r);
  }
  return bytes;
}

expected<void> write_file(const std::string& path, std::string_view bytes) {
  fd_guard f{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) return os_error("cannot create", path);
  if (!io::write_fully(f.fd, bytes.data(), bytes.size())) return os_error("cannot write", path);
  if (::fsync(f.fd) != 0) return os_error("cannot flush", path);
  return {};
}

}  // namespace detail

}  // namespace af::saved_model
