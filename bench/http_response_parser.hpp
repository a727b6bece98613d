#pragma once

// The load generator's HTTP/1.1 response parser (bench/load_generator): incremental, so that a
// response may arrive split anywhere; it skips bodies instead of storing them.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace af::bench {

/// Incremental parser of a stream of HTTP/1.1 responses; bytes may arrive split anywhere.
/// Interim 1xx responses are skipped. Response bodies are skipped, not stored.
class http_response_parser {
 public:
  enum class outcome {
    need_more,      // every byte given was consumed; the response is not complete yet
    response_done,  // one response completed; `pos` stops right after it
    malformed,      // the stream cannot be parsed any further; the connection must be dropped
  };

  /// Consumes `data` from `pos` until one response completes or the data runs out.
  outcome feed(std::string_view data, std::size_t& pos);

  /// The peer closed the connection: completes a response delimited by the close; a response cut
  /// short is malformed; with nothing pending, need_more (a clean close between responses).
  outcome finish();

  /// Set before a response's headers arrive when its request was HEAD: such answers have no body.
  void expect_no_body(bool no_body) { head_request_ = no_body; }

  /// True while some bytes of a response have been consumed but the response is not complete.
  bool mid_response() const { return phase_ != phase::status_line || !line_.empty(); }

  int status() const { return status_; }            // of the last completed response
  bool keep_alive() const { return keep_alive_; }   // false: the server closes after it

 private:
  enum class phase { status_line, headers, body_by_length, body_until_close, chunk_size, chunk_data,
                     chunk_data_end, trailers };

  // Appends bytes up to and including the next '\n' to line_; true when a whole line is there.
  bool take_line(std::string_view data, std::size_t& pos);
  bool on_status_line();
  bool on_header_line();
  outcome on_headers_end();
  outcome complete();

  static constexpr std::size_t max_line_bytes = 64 * 1024;

  phase phase_ = phase::status_line;
  std::string line_;  // the current line so far, which may span reads
  int status_ = 0;
  bool keep_alive_ = true;
  bool http_1_0_ = false;
  bool chunked_ = false;
  bool has_length_ = false;
  bool head_request_ = false;
  uint64_t remaining_ = 0;  // body or chunk bytes still to skip
};

}  // namespace af::bench
