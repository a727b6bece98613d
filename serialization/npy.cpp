// .npy: the magic, the version, the header's length, the dict literal, the elements.

#include "serialization/npy.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "serialization/write_fully.hpp"

namespace af::npy {

namespace {

constexpr std::string_view magic = "\x93NUMPY";

struct descr_entry {
  std::string_view code;  // without the byte-order character
  dtype type;
};
// One-byte types carry '|' (no byte order); the rest must be little-endian ('<').
constexpr descr_entry descrs[] = {{"f4", dtype::f32}, {"f8", dtype::f64}, {"f2", dtype::f16}, {"i1", dtype::i8},
                                  {"u1", dtype::u8},  {"i4", dtype::i32}, {"i8", dtype::i64}, {"b1", dtype::boolean}};

struct header_fields {
  std::string descr;
  bool fortran_order = false;
  shape dims;
  bool has_descr = false, has_order = false, has_shape = false;
};

// A small reader of the dict literal NumPy writes: string keys, a string, a bool and a tuple of
// non-negative integers as values. Anything else is refused.
class dict_reader {
 public:
  dict_reader(std::string_view text, std::string source) : text_(text), source_(std::move(source)) {}

  expected<header_fields> read() {
    header_fields out;
    skip_space();
    if (!eat('{')) return fail("the header is not a dict literal");
    for (;;) {
      skip_space();
      if (eat('}')) break;
      AF_TRY_ASSIGN(auto key, string());
      skip_space();
      if (!eat(':')) return fail("no ':' after key '" + key + "'");
      skip_space();
      if (key == "descr") {
        AF_TRY_ASSIGN(out.descr, string());
        out.has_descr = true;
      } else if (key == "fortran_order") {
        AF_TRY_ASSIGN(out.fortran_order, boolean());
        out.has_order = true;
      } else if (key == "shape") {
        AF_TRY_ASSIGN(out.dims, tuple());
        out.has_shape = true;
      } else {
        return fail("unknown key '" + key + "'");
      }
      skip_space();
      if (eat(',')) continue;
      skip_space();
      if (eat('}')) break;
      return fail("expected ',' or '}' after the value of '" + key + "'");
    }
    skip_space();
    if (pos_ != text_.size()) return fail("stray characters after the dict");
    if (!out.has_descr || !out.has_order || !out.has_shape) return fail("the header lacks 'descr', 'fortran_order' or 'shape'");
    return out;
  }

 private:
  error fail(const std::string& what) const {
    return make_error(errc::malformed_input, source_ + ": header: " + what + " (at character " + std::to_string(pos_) + ")");
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t')) ++pos_;
  }
  bool eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  expected<std::string> string() {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return fail("expected a quoted string");
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return fail("an unterminated string");
    std::string out{text_.substr(pos_, end - pos_)};
    pos_ = end + 1;
    return out;
  }
  expected<bool> boolean() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return fail("expected True or False");
  }
  expected<shape> tuple() {
    if (!eat('(')) return fail("the shape is not a tuple");
    shape dims;
    for (;;) {
      skip_space();
      if (eat(')')) break;
      if (dims.size() >= 32) return fail("more than 32 dimensions");
      uint64_t value = 0;
      const std::size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        value = value * 10 + static_cast<uint64_t>(text_[pos_++] - '0');
        if (value > (uint64_t{1} << 48)) return fail("a dimension over 2^48");
      }
      if (pos_ == start) return fail("a dimension that is not a non-negative integer");
      while (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs
      dims.push_back(static_cast<int64_t>(value));
      skip_space();
      if (eat(',')) continue;
      skip_space();
      if (eat(')')) break;
      return fail("expected ',' or ')' in the shape");
    }
    return dims;
  }

  std::string_view text_;
  std::string source_;
  std::size_t pos_ = 0;
};

expected<dtype> dtype_of(const std::string& descr, const std::string& source) {
  if (descr.size() == 3) {
    for (const auto& d : descrs) {
      if (descr.substr(1) != d.code) continue;
      const bool one_byte = size_of(d.type) == 1;
      if (descr[0] == '<' || descr[0] == '|' || (descr[0] == '=' && !one_byte)) return d.type;
      if (descr[0] == '>' && one_byte) return d.type;
      return make_error(errc::unsupported, source + ": dtype '" + descr + "' is big-endian; save it little-endian");
    }
  }
  return make_error(errc::unsupported, source + ": dtype '" + descr +
                                           "' is not one of f4, f8, f2, i1, u1, i4, i8, b1 (little-endian)");
}

}  // namespace

expected<tensor> decode(std::string_view bytes, std::string_view source_name) {
  const std::string source{source_name};
  if (bytes.size() < 10 || bytes.substr(0, magic.size()) != magic)
    return make_error(errc::malformed_input, source + ": not a .npy file (no \\x93NUMPY magic)");
  const auto major = static_cast<uint8_t>(bytes[6]);
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<std::size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return make_error(errc::malformed_input, source + ": truncated header length");
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[8 + i]);
    header_start = 12;
  } else {
    return make_error(errc::unsupported, source + ": format version " + std::to_string(major) + " (this reader knows 1 to 3)");
  }
  if (header_len > bytes.size() - header_start)
    return make_error(errc::malformed_input, source + ": the header's " + std::to_string(header_len) +
                                                 " bytes run past the end of the file (truncated)");
  AF_TRY_ASSIGN(auto fields, dict_reader(bytes.substr(header_start, header_len), source).read());
  if (fields.fortran_order) return make_error(errc::unsupported, source + ": Fortran order; save it in C order");
  AF_TRY_ASSIGN(dtype type, dtype_of(fields.descr, source));
  uint64_t count = 1;
  for (int64_t d : fields.dims) {
    if (d != 0 && count > (uint64_t{1} << 48) / static_cast<uint64_t>(d))
      return make_error(errc::malformed_input, source + ": shape " + to_string(fields.dims) + " is too large");
    count *= static_cast<uint64_t>(d);
  }
  const uint64_t nbytes = count * size_of(type);
  const std::string_view body = bytes.substr(header_start + header_len);
  if (body.size() != nbytes)
    return make_error(errc::malformed_input, source + ": " + std::to_string(body.size()) + " bytes of data, shape " +
                                                 to_string(fields.dims) + " of " + std::string{to_string(type)} + " needs " +
                                                 std::to_string(nbytes) + (body.size() < nbytes ? " (truncated)" : ""));
  AF_TRY_ASSIGN(auto t, tensor::empty(fields.dims, type));
  if (nbytes) std::memcpy(t.raw_data(), body.data(), nbytes);
  if (type == dtype::boolean) {  // NumPy writes 0 and 1; anything else is true, stored as 1
    auto* flags = static_cast<uint8_t*>(t.raw_data());
    for (uint64_t i = 0; i < nbytes; ++i) flags[i] = flags[i] != 0;
  }
  return t;
}

expected<tensor> read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(errc::io_error, "cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return decode(buffer.str(), path);
}

expected<std::string> encode(const tensor& t) {
  const char* code = nullptr;
  for (const auto& d : descrs)
    if (d.type == t.type()) code = d.code.data();
  if (!code) return make_error(errc::unsupported, std::string{"npy: "} + std::string{to_string(t.type())} + " has no NumPy dtype");
  AF_TRY_ASSIGN(auto dense, t.contiguous());
  std::string dict = std::string{"{'descr': '"} + (size_of(t.type()) == 1 ? "|" : "<") + std::string{code, 2} +
                     "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < t.ndim(); ++i) dict += std::to_string(t.dim(i)) + (t.ndim() == 1 || i + 1 < t.ndim() ? ", " : "");
  if (t.ndim() == 1) dict.pop_back();  // "(3,)"
  dict += "), }";
  // Padded with spaces and a newline so the data starts at a multiple of 64 bytes.
  const std::size_t unpadded = magic.size() + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out{magic};
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out.append(static_cast<const char*>(dense.raw_data()), dense.nbytes());
  return out;
}

expected<void> write(const std::string& path, const tensor& t) {
  AF_TRY_ASSIGN(auto bytes, encode(t));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(errc::io_error, "cannot create '" + path + "': " + std::strerror(errno));
  const bool ok = io::write_fully(fd, bytes.data(), bytes.size());
  const int saved = errno;
  ::close(fd);
  if (!ok) return make_error(errc::io_error, "cannot write '" + path + "': " + std::strerror(saved));
  return {};
}

}  // namespace af::npy
