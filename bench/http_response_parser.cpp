#include "bench/http_response_parser.hpp"

#include <cctype>
#include <cstring>
#include <limits>

namespace af::bench {

// --- response parsing ---------------------------------------------------------------------------

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// True when the comma-separated header value lists `token` (case-insensitive).
bool lists_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    if (iequals(trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

// Chunked coding applies when it is the last transfer coding listed.
bool ends_with_chunked(std::string_view value) {
  const std::size_t comma = value.rfind(',');
  return iequals(trim(comma == std::string_view::npos ? value : value.substr(comma + 1)), "chunked");
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool http_response_parser::take_line(std::string_view data, std::size_t& pos) {
  const std::size_t newline = data.find('\n', pos);
  const std::size_t end = newline == std::string_view::npos ? data.size() : newline;
  line_.append(data.data() + pos, end - pos);
  pos = newline == std::string_view::npos ? data.size() : newline + 1;
  if (newline == std::string_view::npos) return false;
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  return true;
}

bool http_response_parser::on_status_line() {
  // "HTTP/1.1 200 OK": the version, one space, three digits.
  std::string_view line = line_;
  if (line.size() < 12 || line.substr(0, 5) != "HTTP/" || line[8] != ' ') return false;
  int status = 0;
  for (std::size_t i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') return false;
    status = status * 10 + (line[i] - '0');
  }
  status_ = status;
  http_1_0_ = line.substr(5, 3) == "1.0";
  keep_alive_ = !http_1_0_;  // HTTP/1.0 closes unless it says keep-alive
  chunked_ = has_length_ = false;
  remaining_ = 0;
  return true;
}

bool http_response_parser::on_header_line() {
  std::string_view line = line_;
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = trim(line.substr(colon + 1));
  if (iequals(name, "content-length")) {
    uint64_t length = 0;
    if (value.empty()) return false;
    for (char c : value) {
      if (c < '0' || c > '9' || length > (std::numeric_limits<uint64_t>::max() - 9) / 10) return false;
      length = length * 10 + static_cast<uint64_t>(c - '0');
    }
    has_length_ = true;
    remaining_ = length;
  } else if (iequals(name, "transfer-encoding")) {
    chunked_ = ends_with_chunked(value);
  } else if (iequals(name, "connection")) {
    if (lists_token(value, "close")) keep_alive_ = false;
    else if (lists_token(value, "keep-alive")) keep_alive_ = true;
  }
  return true;
}

http_response_parser::outcome http_response_parser::on_headers_end() {
  // Interim answers (100 Continue, 103 Early Hints) precede the real one on the same request.
  if (status_ >= 100 && status_ < 200 && status_ != 101) {
    phase_ = phase::status_line;
    return outcome::need_more;
  }
  if (head_request_ || status_ == 204 || status_ == 304) return complete();
  // Chunked coding overrides a Content-Length (RFC 9112 6.3).
  if (chunked_) {
    phase_ = phase::chunk_size;
    return outcome::need_more;
  }
  if (has_length_) {
    if (remaining_ == 0) return complete();
    phase_ = phase::body_by_length;
    return outcome::need_more;
  }
  keep_alive_ = false;  // neither length nor chunks: the body ends where the connection does
  phase_ = phase::body_until_close;
  return outcome::need_more;
}

http_response_parser::outcome http_response_parser::complete() {
  phase_ = phase::status_line;
  return outcome::response_done;
}

http_response_parser::outcome http_response_parser::feed(std::string_view data, std::size_t& pos) {
  while (pos < data.size()) {
    switch (phase_) {
      case phase::body_by_length:
      case phase::chunk_data: {
        const uint64_t take = std::min<uint64_t>(remaining_, data.size() - pos);
        pos += take;
        remaining_ -= take;
        if (remaining_ > 0) return outcome::need_more;
        if (phase_ == phase::body_by_length) return complete();
        phase_ = phase::chunk_data_end;
        continue;
      }
      case phase::body_until_close:
        pos = data.size();
        return outcome::need_more;
      default:
        break;
    }
    // Every other phase reads a line.
    if (!take_line(data, pos)) {
      if (line_.size() > max_line_bytes) return outcome::malformed;
      return outcome::need_more;
    }
    const std::string_view line = line_;
    outcome result = outcome::need_more;
    switch (phase_) {
      case phase::status_line:
        if (line.empty()) break;  // tolerate a stray CRLF between responses
        if (!on_status_line()) return outcome::malformed;
        phase_ = phase::headers;
        break;
      case phase::headers:
        if (line.empty()) result = on_headers_end();
        else if (!on_header_line()) return outcome::malformed;
        break;
      case phase::chunk_size: {
        uint64_t size = 0;
        std::size_t digits = 0;
        for (char c : line) {
          const int v = hex_value(c);
          if (v < 0) break;  // a chunk extension (";name=value") or trailing space follows
          if (size > (std::numeric_limits<uint64_t>::max() >> 4)) return outcome::malformed;
          size = size * 16 + static_cast<uint64_t>(v);
          ++digits;
        }
        if (digits == 0) return outcome::malformed;
        remaining_ = size;
        phase_ = size == 0 ? phase::trailers : phase::chunk_data;
        break;
      }
      case phase::chunk_data_end:
        if (!line.empty()) return outcome::malformed;
        phase_ = phase::chunk_size;
        break;
      case phase::trailers:
        if (line.empty()) result = complete();
        break;
      default:
        return outcome::malformed;
    }
    line_.clear();
    if (result == outcome::response_done) return result;
  }
  return outcome::need_more;
}

http_response_parser::outcome http_response_parser::finish() {
  if (phase_ == phase::body_until_close) {
    keep_alive_ = false;
    return complete();
  }
  return mid_response() ? outcome::malformed : outcome::need_more;
}

}  // namespace af::bench
