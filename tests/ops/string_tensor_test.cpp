// Tensors of byte strings (TF's DT_STRING): views, copies, concat and gather keep every byte, and
// nothing numeric or byte-level accepts them.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "ops/array_ops.hpp"
#include "ops/dtype.hpp"
#include "ops/tensor.hpp"

using af::dtype;
using af::tensor;

namespace {

// Strings long enough to live on the heap, with bytes that are not UTF-8 and a NUL inside.
std::vector<std::string> sample_strings(int n, const std::string& tag) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back(tag + std::to_string(i) + "-" + '\0' + "\xff\xfe" + "-a string longer than any small-string buffer");
  return out;
}

}  // namespace

TEST_CASE("string is a dtype of its own that no byte-level format can name", "[cpu][dtype][string]") {
  CHECK(af::to_string(dtype::string) == "string");
  CHECK(af::size_of(dtype::string) == sizeof(std::string));
  CHECK_FALSE(af::is_floating(dtype::string));
  CHECK_FALSE(af::is_integral(dtype::string));
  // Files and messages carry raw element bytes: their decoders must never make string tensors.
  auto from_bytes = af::dtype_from_code(static_cast<uint32_t>(dtype::string));
  REQUIRE_FALSE(from_bytes);
  CHECK(from_bytes.error_value().message.find("string") != std::string::npos);
  CHECK_FALSE(af::parse_dtype("string"));
  // A graph declares it.
  CHECK(*af::value_dtype_from_code(9) == dtype::string);
  CHECK_FALSE(af::value_dtype_from_code(10));
  CHECK(*af::value_dtype_from_code(0) == dtype::f32);
}

TEST_CASE("a string tensor keeps every byte through views, copies and comparison", "[cpu][tensor][string]") {
  const auto values = sample_strings(6, "r");
  const tensor t = tensor::from_vector(values, {2, 3});
  CHECK(t.type() == dtype::string);
  CHECK(t.to_vector<std::string>() == values);

  auto row = t.slice(0, 1, 2).value();
  CHECK(row.to_vector<std::string>() == std::vector<std::string>(values.begin() + 3, values.end()));
  auto column = t.slice(1, 2, 3).value();  // not contiguous
  CHECK_FALSE(column.is_contiguous());
  CHECK(column.to_vector<std::string>() == std::vector<std::string>{values[2], values[5]});
  auto dense = column.contiguous().value();
  CHECK(dense.is_contiguous());
  CHECK(dense.to_vector<std::string>() == std::vector<std::string>{values[2], values[5]});

  auto transposed = t.transpose().value().reshape({6}).value();  // a copy: the view is not contiguous
  CHECK(transposed.to_vector<std::string>() ==
        std::vector<std::string>{values[0], values[3], values[1], values[4], values[2], values[5]});

  // A clone shares nothing: the original may go away.
  tensor copy;
  {
    const tensor temporary = tensor::from_vector(sample_strings(6, "r"), {2, 3});
    copy = temporary.clone().value();
  }
  CHECK(af::all_equal(copy, t));
  CHECK(af::all_close(copy, t));
  auto other = sample_strings(6, "r");
  other[4].back() = 'X';
  CHECK_FALSE(af::all_equal(tensor::from_vector(other, {2, 3}), t));
  CHECK_FALSE(af::all_equal(tensor::from_vector(values, {3, 2}), t));

  auto empty = tensor::empty({2, 2}, dtype::string).value();
  CHECK(empty.to_vector<std::string>() == std::vector<std::string>(4));
  auto zeros = tensor::zeros({3}, dtype::string).value();
  CHECK(zeros.to_vector<std::string>() == std::vector<std::string>(3));
}

TEST_CASE("concat and gather copy strings as strings", "[cpu][array][string]") {
  const auto a = sample_strings(4, "a"), b = sample_strings(2, "b");
  const tensor ta = tensor::from_vector(a, {2, 2}), tb = tensor::from_vector(b, {1, 2});
  auto rows = af::concat({ta, tb}, 0).value();
  CHECK(rows.shape() == af::shape{3, 2});
  CHECK(rows.to_vector<std::string>() == std::vector<std::string>{a[0], a[1], a[2], a[3], b[0], b[1]});
  auto columns = af::concat({ta, tb.reshape({2, 1}).value()}, 1).value();
  CHECK(columns.to_vector<std::string>() == std::vector<std::string>{a[0], a[1], b[0], a[2], a[3], b[1]});
  auto stacked = af::stack({ta, ta}, 0).value();
  CHECK(stacked.shape() == af::shape{2, 2, 2});

  // Class index to label, as TF's index_to_string does with a vocabulary.
  const tensor labels = tensor::from_vector(std::vector<std::string>{"cat", "dog", "bird"});
  auto picked = af::gather(labels, tensor::from_vector(std::vector<int64_t>{2, 0, 2, 1}, {2, 2}), 0).value();
  CHECK(picked.shape() == af::shape{2, 2});
  CHECK(picked.to_vector<std::string>() == std::vector<std::string>{"bird", "cat", "bird", "dog"});
  auto by_column = af::gather(ta, tensor::from_vector(std::vector<int32_t>{1}), 1).value();
  CHECK(by_column.to_vector<std::string>() == std::vector<std::string>{a[1], a[3]});
}

TEST_CASE("numbers and strings do not convert into each other", "[cpu][tensor][string]") {
  const tensor s = tensor::from_vector(std::vector<std::string>{"1", "2"});
  const tensor f = tensor::from_vector(std::vector<float>{1, 2});
  tensor f_out = tensor::empty({2}, dtype::f32).value();
  auto into_numbers = af::copy_into(s, f_out);
  REQUIRE_FALSE(into_numbers);
  CHECK(into_numbers.error_value().code == af::errc::dtype_mismatch);
  tensor s_out = tensor::empty({2}, dtype::string).value();
  CHECK_FALSE(af::copy_into(f, s_out));
  CHECK_FALSE(tensor::full({2}, 1.0, dtype::string));
  CHECK_FALSE(tensor::arange(3, dtype::string));
  CHECK_FALSE(af::concat({s, f}, 0));
  CHECK_FALSE(af::all_equal(s, f));
}

TEST_CASE("a string tensor prints its bytes quoted and escaped", "[cpu][tensor][string]") {
  const tensor t = tensor::from_vector(std::vector<std::string>{"ok", std::string("a\"\\\n\xff", 5)});
  CHECK(t.to_string() == "tensor(string, [2], [\"ok\", \"a\\x22\\x5c\\x0a\\xff\"])");
  CHECK(t.to_string(1) == "tensor(string, [2], [\"ok\", ... (2 elements)])");
}
