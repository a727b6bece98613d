#pragma once

// One write loop for every file writer in serialization/: write(2) until all bytes are out,
// retrying on EINTR. False with errno set when the system refuses; callers name the file.

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace af::io {

inline bool write_fully(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace af::io
