#include "ops/shape.hpp"

#include <algorithm>
#include <limits>

namespace af {

int64_t numel(const shape& s) noexcept {
  int64_t n = 1;
  for (auto d : s)
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  return n;
}

strides contiguous_strides(const shape& s) {
  strides st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    if (__builtin_mul_overflow(acc, std::max<int64_t>(s[i], 1), &acc)) acc = std::numeric_limits<int64_t>::max();
  }
  return st;
}

std::string to_string(const shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

expected<shape> broadcast_shapes(const shape& a, const shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else
      return make_error(errc::shape_mismatch, std::string(op) + ": cannot broadcast shapes " +
                                                  to_string(a) + " and " + to_string(b));
  }
  return out;
}

expected<int> normalize_axis(int64_t axis, int64_t rank, const char* op) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1) || (rank == 0 && axis != 0 && axis != -1))
    return make_error(errc::out_of_range, std::string(op) + ": axis " + std::to_string(axis) +
                                              " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(a);
}

}  // namespace af
