#include "apps/serving/rest_fast_decode.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>

#include "apps/serving/element_range.hpp"

namespace af::serving {

namespace {

// A cursor over the body; every parse function returns false at anything outside the simple shape.
struct cursor {
  const char* at;
  const char* end;

  void skip_space() {
    while (at < end && (*at == ' ' || *at == '\n' || *at == '\r' || *at == '\t')) ++at;
  }
  bool take(char c) {
    skip_space();
    if (at == end || *at != c) return false;
    ++at;
    return true;
  }
  bool peek(char c) {
    skip_space();
    return at < end && *at == c;
  }
  // A string of printable ASCII without escapes (anything else, UTF-8 included, is left to the
  // general decoder, which validates it).
  bool string(std::string_view& out) {
    if (!take('"')) return false;
    const char* start = at;
    while (at < end && *at != '"') {
      if (*at == '\\' || static_cast<unsigned char>(*at) < 0x20 || static_cast<unsigned char>(*at) >= 0x80) return false;
      ++at;
    }
    if (at == end) return false;
    out = std::string_view{start, static_cast<std::size_t>(at - start)};
    ++at;
    return true;
  }
};

// Nested arrays of numbers: their dims (checked rectangular) and their values in order.
struct numeric_array {
  shape dims;
  std::vector<double> values;
  bool integral = true;  // every number was written without a fraction or exponent
  std::vector<int64_t> integers;
  int leaf_depth = -1;   // the depth of the arrays that hold numbers
};

bool number_char(char ch) { return (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == '.' || ch == 'e' || ch == 'E'; }

bool is_digit(char ch) { return static_cast<unsigned char>(ch - '0') < 10; }

// Clinger's fast path, in the same pass that finds the token's end: a decimal whose digits make
// an integer of at most 2^53 and a power of ten within 1e22 are both exact doubles, so one
// multiplication or division gives the correctly rounded value. Most numbers in requests ("0.347",
// "12", "-1.5e-3") take it; the end of the token, or nullptr for the others (from_chars reads
// them). A number without fraction or exponent is also given as an integer.
const char* exact_decimal(const char* p, const char* end, double& out, int64_t& integer, bool& plain_integer) {
  static constexpr double powers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const bool negative = p < end && *p == '-';
  p += negative;
  const char* first = p;
  uint64_t mantissa = 0;
  for (; p < end && is_digit(*p); ++p) mantissa = mantissa * 10 + static_cast<uint64_t>(*p - '0');
  std::ptrdiff_t digits = p - first;
  // JSON's grammar: an integer part, without leading zeros ("01" is not a JSON number).
  if (digits == 0 || (digits > 1 && *first == '0')) return nullptr;
  int exponent = 0;
  plain_integer = true;
  if (p < end && *p == '.') {
    plain_integer = false;
    const char* fraction = ++p;
    for (; p < end && is_digit(*p); ++p) mantissa = mantissa * 10 + static_cast<uint64_t>(*p - '0');
    if (p == fraction) return nullptr;  // "1." is not a JSON number either
    digits += p - fraction;
    exponent = -static_cast<int>(p - fraction);
  }
  // 19 digits cannot overflow 64 bits; longer ones (and none) go to from_chars.
  if (digits == 0 || digits > 19) return nullptr;
  if (p < end && (*p == 'e' || *p == 'E')) {
    plain_integer = false;
    ++p;
    const bool minus = p < end && *p == '-';
    if (p < end && (*p == '-' || *p == '+')) ++p;
    int e = 0;
    const char* exponent_first = p;
    for (; p < end && is_digit(*p) && e < 1000; ++p) e = e * 10 + (*p - '0');
    if (p == exponent_first) return nullptr;
    exponent += minus ? -e : e;
  }
  if ((p < end && number_char(*p)) || exponent < -22 || exponent > 22 || mantissa > (uint64_t{1} << 53)) return nullptr;
  double v = static_cast<double>(mantissa);
  v = exponent >= 0 ? v * powers[exponent] : v / powers[-exponent];
  // "-0" is the integer 0, as the general decoder reads it; "-0.0" is a negative zero.
  out = negative && !(plain_integer && mantissa == 0) ? -v : v;
  integer = negative ? -static_cast<int64_t>(mantissa) : static_cast<int64_t>(mantissa);
  return p;
}

// The end of the JSON number at `p` (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), or nullptr.
const char* json_number_end(const char* p, const char* end) {
  auto digits = [&] {
    const char* from = p;
    while (p < end && is_digit(*p)) ++p;
    return p - from;
  };
  if (p < end && *p == '-') ++p;
  const char* integer_part = p;
  const auto n = digits();
  if (n == 0 || (n > 1 && *integer_part == '0')) return nullptr;
  if (p < end && *p == '.') {
    ++p;
    if (digits() == 0) return nullptr;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    if (p < end && (*p == '+' || *p == '-')) ++p;
    if (digits() == 0) return nullptr;
  }
  return p;
}

bool number(cursor& c, numeric_array& a) {
  const char* start = c.at;
  double v = 0;
  int64_t integer = 0;
  bool plain_integer = true;
  const char* p = exact_decimal(start, c.end, v, integer, plain_integer);
  if (p) {
    a.values.push_back(v);
    if (a.integral) {
      if (plain_integer) a.integers.push_back(integer);
      else a.integral = false;
    }
    c.at = p;
    return true;
  }
  p = json_number_end(start, c.end);
  if (!p || (p < c.end && number_char(*p))) return false;
  plain_integer = std::find_if(start, p, [](char ch) { return ch == '.' || ch == 'e' || ch == 'E'; }) == p;
  auto r = std::from_chars(start, p, v);
  if (p == start || r.ec != std::errc{} || r.ptr != p) return false;
  a.values.push_back(v);
  if (a.integral) {
    int64_t i = 0;
    auto ri = std::from_chars(start, p, i);
    if (plain_integer && ri.ec == std::errc{} && ri.ptr == p) a.integers.push_back(i);
    else a.integral = false;
  }
  c.at = p;
  return true;
}

// The numbers of an innermost array, from its first one to the ']' (not taken): the loop that
// reads almost every byte of a request.
bool leaf_numbers(cursor& c, numeric_array& a, int64_t& count) {
  for (;;) {
    c.skip_space();
    if (!number(c, a)) return false;
    ++count;
    c.skip_space();
    if (c.at == c.end || *c.at != ',') return true;
    ++c.at;
  }
}

bool array(cursor& c, numeric_array& a, int depth) {
  // The body's object and this array's ancestors are the levels above it: deeper is left to
  // decode_predict, which refuses it by name.
  if (depth + 2 > max_json_depth) return false;
  if (!c.take('[')) return false;
  if (static_cast<int>(a.dims.size()) == depth) a.dims.push_back(-1);  // the first array at this depth
  int64_t count = 0;
  if (!c.peek(']') && !c.peek('[')) {
    if (a.leaf_depth < 0) {
      if (static_cast<int>(a.dims.size()) != depth + 1) return false;
      a.leaf_depth = depth;
    } else if (a.leaf_depth != depth) {
      return false;
    }
    if (!leaf_numbers(c, a, count)) return false;
  } else if (!c.peek(']')) {
    // An array of arrays: a number beside them would make it ragged.
    do {
      if (!c.peek('[') || (a.leaf_depth >= 0 && a.leaf_depth <= depth)) return false;
      if (!array(c, a, depth + 1)) return false;
      ++count;
    } while (c.take(','));
  }
  if (!c.take(']')) return false;
  // The first array at a depth fixes its length; later ones must match (rectangular).
  auto& length = a.dims[static_cast<std::size_t>(depth)];
  if (length == -1) length = count;
  else if (length != count) return false;
  return true;
}

}  // namespace

std::optional<rest_predict_request> decode_simple_predict(std::string_view body, const signature_lookup& lookup) {
  cursor c{body.data(), body.data() + body.size()};
  rest_predict_request out;
  numeric_array values;
  values.values.reserve(body.size() / 4);  // a number takes at least two characters with its comma
  bool have_values = false;
  if (!c.take('{')) return std::nullopt;
  do {
    std::string_view key;
    if (!c.string(key) || !c.take(':')) return std::nullopt;
    if (key == "signature_name") {
      std::string_view name;
      if (!c.string(name)) return std::nullopt;
      out.signature_name = std::string{name};
    } else if ((key == "instances" || key == "inputs") && !have_values) {
      out.row_format = key == "instances";
      if (!c.peek('[')) return std::nullopt;
      if (!array(c, values, 0)) return std::nullopt;
      have_values = true;
    } else {
      return std::nullopt;
    }
  } while (c.take(','));
  if (!c.take('}') || !have_values) return std::nullopt;
  c.skip_space();
  if (c.at != c.end) return std::nullopt;

  auto signature = lookup(out.signature_name);
  if (!signature || (*signature)->inputs.size() != 1) return std::nullopt;
  const graph::tensor_spec& spec = (*signature)->inputs.front();
  if (values.dims.size() != spec.type.dims.size() || values.dims.empty() || values.dims[0] < 1) return std::nullopt;
  for (std::size_t d = 0; d < values.dims.size(); ++d)
    if (spec.type.dims[d] >= 0 && spec.type.dims[d] != values.dims[d]) return std::nullopt;
  const dtype type = spec.type.type;
  if (is_string(type)) return std::nullopt;  // numbers only here; strings are decode_predict's
  // Integers are stored from their exact values; anything else that does not fit its dtype
  // (a fraction for an integer input, 300 for a u8, 1e39 for an f32) is left to decode_predict,
  // which names it.
  if (is_integral(type) && !values.integral) return std::nullopt;
  auto t = tensor::empty(values.dims, type);
  if (!t) return std::nullopt;
  auto* dst = static_cast<std::byte*>(t->raw_data());
  const std::size_t item = size_of(type);
  if (type == dtype::f32) {
    constexpr double largest = std::numeric_limits<float>::max();
    auto* f = reinterpret_cast<float*>(dst);
    for (std::size_t i = 0; i < values.values.size(); ++i) {
      if (values.values[i] > largest || values.values[i] < -largest) return std::nullopt;
      f[i] = static_cast<float>(values.values[i]);
    }
  } else if (type == dtype::i64) {
    std::memcpy(dst, values.integers.data(), values.integers.size() * sizeof(int64_t));
  } else if (is_integral(type)) {
    for (std::size_t i = 0; i < values.integers.size(); ++i)
      if (!store_integer_if_fits(dst + i * item, type, values.integers[i])) return std::nullopt;
  } else {
    for (std::size_t i = 0; i < values.values.size(); ++i)
      if (!store_number_if_fits(dst + i * item, type, values.values[i])) return std::nullopt;
  }
  out.inputs.push_back({spec.name, std::move(*t)});
  return out;
}

}  // namespace af::serving
