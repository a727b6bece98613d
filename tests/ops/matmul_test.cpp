#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "op_test_support.hpp"
#include "ops/linalg.hpp"
#include "ops/parallel.hpp"
#include "ops/tensor.hpp"

using af::dtype;
using af::errc;
using af::shape;
using af::tensor;

namespace {

tensor random_tensor(const shape& dims, dtype type, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  // Small integers keep integer products exact; unsigned dtypes get no negative values.
  std::uniform_int_distribution<int> small(type == dtype::u8 ? 0 : -4, 4);
  auto t = tensor::empty(dims, type);
  REQUIRE(t);
  char* p = static_cast<char*>(t->raw_data());
  for (int64_t i = 0; i < t->numel(); ++i)
    af::store_from_double(p + i * af::size_of(type), type, af::is_floating(type) ? dist(rng) : small(rng));
  return *t;
}

// Naive matmul in double over the broadcast batch, reading elements through at() so that any view
// layout is honoured. Operands have rank >= 2.
tensor reference_matmul(const tensor& a, const tensor& b, bool ta, bool tb) {
  const int ra = a.ndim(), rb = b.ndim();
  const int64_t m = ta ? a.dim(-1) : a.dim(-2), k = ta ? a.dim(-2) : a.dim(-1);
  const int64_t n = tb ? b.dim(-2) : b.dim(-1);
  const int rank = std::max(ra, rb) - 2;
  shape batch(rank);
  for (int d = 0; d < rank; ++d) {
    const int64_t da = d - (rank - (ra - 2)) >= 0 ? a.shape()[d - (rank - (ra - 2))] : 1;
    const int64_t db = d - (rank - (rb - 2)) >= 0 ? b.shape()[d - (rank - (rb - 2))] : 1;
    batch[d] = da == 1 ? db : da;
  }
  shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  std::vector<double> out;
  std::vector<int64_t> bi(rank, 0);
  for (int64_t t = 0; t < af::numel(batch); ++t) {
    std::vector<int64_t> ia(ra), ib(rb);
    for (int d = 0; d < ra - 2; ++d) ia[d] = a.shape()[d] == 1 ? 0 : bi[d + rank - (ra - 2)];
    for (int d = 0; d < rb - 2; ++d) ib[d] = b.shape()[d] == 1 ? 0 : bi[d + rank - (rb - 2)];
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          ia[ra - 2] = ta ? p : i;
          ia[ra - 1] = ta ? i : p;
          ib[rb - 2] = tb ? j : p;
          ib[rb - 1] = tb ? p : j;
          acc += a.at(ia) * b.at(ib);
        }
        out.push_back(acc);
      }
    for (int d = rank; d-- > 0;) {
      if (++bi[d] < batch[d]) break;
      bi[d] = 0;
    }
  }
  if (out.empty()) return *tensor::zeros(out_shape, dtype::f64);
  return tensor::from_vector(out, out_shape);
}

void check_matches(const tensor& got, const tensor& want, double tol) {
  INFO("got " << got.to_string() << "\nwant " << want.to_string());
  REQUIRE(got.shape() == want.shape());
  CHECK(af::all_close(got, want, tol, tol));
}

// A tensor whose storage claims to live on a GPU; the CPU kernels must refuse it before reading.
tensor tensor_on_gpu(const shape& dims) {
  auto bytes = static_cast<std::size_t>(af::numel(dims)) * 4;
  auto buf = std::make_shared<af::storage>(new char[bytes], bytes, af::device::cuda(0),
                                           [](void* p) { delete[] static_cast<char*>(p); });
  return tensor{dtype::f32, dims, af::contiguous_strides(dims), 0, buf};
}

}  // namespace

TEST_CASE("2-D matmul of random shapes matches a naive triple loop for every transpose flag", "[cpu][matmul]") {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int64_t> dim(1, 37);
  for (dtype type : {dtype::f32, dtype::f64})
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t m = dim(rng), n = dim(rng), k = dim(rng);
      const bool ta = trial & 1, tb = trial & 2;
      auto a = random_tensor(ta ? shape{k, m} : shape{m, k}, type, rng);
      auto b = random_tensor(tb ? shape{n, k} : shape{k, n}, type, rng);
      INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb);
      auto c = af::matmul(a, b, ta, tb);
      REQUIRE(c);
      CHECK(c->type() == type);
      check_matches(*c, reference_matmul(a, b, ta, tb), type == dtype::f32 ? 1e-4 : 1e-10);
    }
}

TEST_CASE("matmul reads transposed and sliced views the same as their contiguous copies", "[cpu][matmul]") {
  std::mt19937 rng(7);
  auto x = random_tensor({12, 10}, dtype::f32, rng);
  auto y = random_tensor({10, 9}, dtype::f32, rng);
  SECTION("a transposed view") {
    auto xt = *x.transpose();  // [10,12], column-major
    auto c = af::matmul(xt, *x.slice(1, 0, 9));
    REQUIRE(c);
    check_matches(*c, reference_matmul(xt, *x.slice(1, 0, 9), false, false), 1e-4);
    auto dense = af::matmul(*xt.clone(), *x.slice(1, 0, 9)->clone());
    REQUIRE(dense);
    check_matches(*c, *dense, 1e-5);
  }
  SECTION("a slice with a step (genuinely strided) in both positions") {
    auto xs = *x.slice(1, 0, 10, 2);  // [12,5], column step 2
    auto ys = *y.slice(0, 0, 10, 2);  // [5,9], row step 2
    auto c = af::matmul(xs, ys);
    REQUIRE(c);
    check_matches(*c, reference_matmul(xs, ys, false, false), 1e-4);
  }
  SECTION("a transposed view combined with the transpose flag") {
    auto yt = *y.transpose();  // [9,10]
    auto c = af::matmul(x.slice(1, 0, 10).value(), yt, false, true);
    REQUIRE(c);
    check_matches(*c, reference_matmul(x, yt, false, true), 1e-4);
  }
  SECTION("an expanded (stride 0) operand") {
    auto row = random_tensor({1, 10}, dtype::f32, rng);
    auto wide = *row.expand({6, 10});
    auto c = af::matmul(wide, y);
    REQUIRE(c);
    check_matches(*c, reference_matmul(wide, y, false, false), 1e-4);
  }
}

TEST_CASE("batched matmul broadcasts the batch dimensions like NumPy", "[cpu][matmul]") {
  std::mt19937 rng(3);
  struct batch_case { shape a, b; bool ta, tb; shape out; };
  const std::vector<batch_case> cases = {
      {{4, 5, 6}, {6, 3}, false, false, {4, 5, 3}},
      {{4, 6, 5}, {6, 3}, true, false, {4, 5, 3}},
      {{5, 6}, {4, 6, 3}, false, false, {4, 5, 3}},
      {{4, 5, 6}, {4, 6, 3}, false, false, {4, 5, 3}},
      {{4, 5, 6}, {4, 3, 6}, false, true, {4, 5, 3}},
      {{2, 1, 5, 6}, {1, 3, 6, 4}, false, false, {2, 3, 5, 4}},
      {{2, 1, 6, 5}, {3, 4, 6}, true, true, {2, 3, 5, 4}},
      {{3, 70, 50}, {50, 30}, false, false, {3, 70, 30}},     // folds into one 210-row GEMM
      {{3, 70, 50}, {1, 30, 50}, false, true, {3, 70, 30}},
      {{64, 5, 7}, {64, 7, 3}, false, false, {64, 5, 3}},     // many small GEMMs spread over threads
  };
  for (const auto& bc : cases) {
    INFO(af::to_string(bc.a) << " x " << af::to_string(bc.b) << " ta=" << bc.ta << " tb=" << bc.tb);
    auto a = random_tensor(bc.a, dtype::f32, rng);
    auto b = random_tensor(bc.b, dtype::f32, rng);
    auto c = af::matmul(a, b, bc.ta, bc.tb);
    REQUIRE(c);
    CHECK(c->shape() == bc.out);
    check_matches(*c, reference_matmul(a, b, bc.ta, bc.tb), 1e-4);
  }
}

TEST_CASE("batched matmul of a non-contiguous batch matches the reference", "[cpu][matmul]") {
  std::mt19937 rng(11);
  auto base = random_tensor({6, 4, 5}, dtype::f64, rng);
  auto every_other = *base.slice(0, 0, 6, 2);           // batch stride doubled
  auto permuted = *base.permute({1, 0, 2});              // [4,6,5]: batch dim not outermost in memory
  auto b = random_tensor({5, 3}, dtype::f64, rng);
  for (const tensor& a : {every_other, permuted}) {
    auto c = af::matmul(a, b);
    REQUIRE(c);
    check_matches(*c, reference_matmul(a, b, false, false), 1e-10);
  }
}

TEST_CASE("matmul handles size-1 and zero-size dimensions", "[cpu][matmul]") {
  std::mt19937 rng(5);
  SECTION("unit dimensions") {
    for (shape dims : {shape{1, 1, 1}, shape{1, 7, 1}, shape{7, 1, 1}, shape{1, 1, 7}, shape{7, 1, 7}}) {
      auto a = random_tensor({dims[0], dims[1]}, dtype::f32, rng);
      auto b = random_tensor({dims[1], dims[2]}, dtype::f32, rng);
      auto c = af::matmul(a, b);
      REQUIRE(c);
      check_matches(*c, reference_matmul(a, b, false, false), 1e-5);
      auto ct = af::matmul(*a.transpose()->clone(), *b.transpose()->clone(), true, true);
      REQUIRE(ct);
      check_matches(*ct, *c, 1e-6);
    }
  }
  SECTION("an empty batch gives an empty result") {
    auto c = af::matmul(*tensor::zeros({0, 3, 4}, dtype::f32), random_tensor({4, 5}, dtype::f32, rng));
    REQUIRE(c);
    CHECK(c->shape() == shape{0, 3, 5});
  }
  SECTION("zero rows or columns give an empty result") {
    auto c = af::matmul(*tensor::zeros({0, 4}, dtype::f32), random_tensor({4, 5}, dtype::f32, rng));
    REQUIRE(c);
    CHECK(c->shape() == shape{0, 5});
  }
  SECTION("an empty inner dimension gives zeros") {
    auto c = af::matmul(*tensor::zeros({3, 0}, dtype::f64), *tensor::zeros({0, 2}, dtype::f64));
    REQUIRE(c);
    CHECK(af::all_equal(*c, *tensor::zeros({3, 2}, dtype::f64)));
  }
}

TEST_CASE("1-D operands act as a row on the left and a column on the right", "[cpu][matmul]") {
  auto v = tensor::from_vector<float>({1, 2, 3});
  auto m = tensor::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  auto vm = af::matmul(v, m);
  REQUIRE(vm);
  CHECK(vm->shape() == shape{2});
  CHECK(vm->to_vector<float>() == std::vector<float>{4, 5});
  auto mt = af::matmul(m, v, true, false);
  REQUIRE(mt);
  CHECK(mt->shape() == shape{2});
  CHECK(mt->to_vector<float>() == std::vector<float>{4, 5});
  auto dot = af::matmul(v, v);
  REQUIRE(dot);
  CHECK(dot->shape() == shape{});
  CHECK(dot->item<float>() == 14.0f);
  auto batched = af::matmul(*tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 1, 3}).expand({2, 4, 3}), v);
  REQUIRE(batched);
  CHECK(batched->shape() == shape{2, 4});
  CHECK(batched->to_vector<float>() == std::vector<float>{14, 14, 14, 14, 32, 32, 32, 32});
}

TEST_CASE("f16 and bf16 matmul multiply in f32 and round back", "[cpu][matmul]") {
  std::mt19937 rng(9);
  for (dtype type : {dtype::f16, dtype::bf16}) {
    auto a = random_tensor({2, 9, 13}, type, rng);
    auto b = random_tensor({13, 6}, type, rng);
    auto c = af::matmul(a, b);
    REQUIRE(c);
    CHECK(c->type() == type);
    check_matches(*c, reference_matmul(a, b, false, false), type == dtype::f16 ? 5e-3 : 3e-2);
  }
}

TEST_CASE("integer matmul is exact and wraps around on overflow", "[cpu][matmul]") {
  std::mt19937 rng(13);
  for (dtype type : {dtype::i8, dtype::u8, dtype::i32, dtype::i64}) {
    auto a = random_tensor({3, 4, 5}, type, rng);
    auto b = random_tensor({5, 6}, type, rng);
    auto c = af::matmul(a, b, false, false);
    REQUIRE(c);
    CHECK(c->type() == type);
    auto want = reference_matmul(a, b, false, false);
    auto want_cast = tensor::empty(want.shape(), type);
    REQUIRE(want_cast);
    REQUIRE(af::copy_into(want, *want_cast));
    CHECK(af::all_equal(*c, *want_cast));
  }
  auto a = tensor::from_vector<int8_t>({100, 100}, {1, 2});
  auto b = tensor::from_vector<int8_t>({2, 2}, {2, 1});
  auto c = af::matmul(a, b);
  REQUIRE(c);
  CHECK(c->to_vector<int64_t>() == std::vector<int64_t>{400 - 512});
  auto big = tensor::from_vector<int64_t>({int64_t{1} << 62, 3}, {1, 2});
  auto c64 = af::matmul(big, tensor::from_vector<int64_t>({4, 1}, {2, 1}));
  REQUIRE(c64);
  CHECK(c64->to_vector<int64_t>() == std::vector<int64_t>{3});  // 2^64 wraps to 0, plus 3
}

TEST_CASE("matmul follows the thread budget and gives the same result on one thread", "[cpu][matmul]") {
  std::mt19937 rng(17);
  auto a = random_tensor({8, 96, 80}, dtype::f32, rng);
  auto b = random_tensor({80, 72}, dtype::f32, rng);
  const int saved = af::thread_budget();
  af::set_thread_budget(1);
  auto one = af::matmul(a, b);
  af::set_thread_budget(saved);
  auto many = af::matmul(a, b);
  REQUIRE(one);
  REQUIRE(many);
  check_matches(*one, *many, 1e-5);
  check_matches(*many, reference_matmul(a, b, false, false), 1e-4);
}

TEST_CASE("matmul reports bad operands with the op name and the shapes", "[cpu][matmul]") {
  auto f23 = *tensor::zeros({2, 3}, dtype::f32);
  auto f45 = *tensor::zeros({4, 5}, dtype::f32);
  check_error(af::matmul(f23, f45), errc::shape_mismatch, "matmul: inner dimensions differ: [2,3] x [4,5]");
  check_error(af::matmul(f23, f23, false, false), errc::shape_mismatch, "[2,3] x [2,3]");
  check_error(af::matmul(f23, *tensor::zeros({2, 4}, dtype::f32), false, true), errc::shape_mismatch,
              "transpose_b=true");
  check_error(af::matmul(*tensor::zeros({2, 2, 3}, dtype::f32), *tensor::zeros({3, 3, 4}, dtype::f32)),
              errc::shape_mismatch, "matmul: batch dimensions cannot be broadcast: [2,2,3] x [3,3,4]");
  check_error(af::matmul(f23, *tensor::zeros({3, 2}, dtype::f64)), errc::dtype_mismatch,
              "matmul: operand dtypes differ: f32 [2,3] x f64 [3,2]");
  check_error(af::matmul(*tensor::zeros({2, 2}, dtype::boolean), *tensor::zeros({2, 2}, dtype::boolean)),
              errc::dtype_mismatch, "matmul: bool");
  check_error(af::matmul(tensor::scalar(1.0f), f23), errc::invalid_argument, "matmul: operands must have rank >= 1: [] x [2,3]");
  check_error(af::matmul(tensor{}, f23), errc::invalid_argument, "matmul");
  check_error(af::matmul(tensor_on_gpu({2, 3}), *tensor::zeros({3, 2}, dtype::f32)), errc::unsupported,
              "matmul: CPU kernel got tensors on cuda:0");
}

TEST_CASE("OpenBLAS runs kernels for this CPU, not its Prescott fallback", "[cpu][matmul]") {
  const std::string core = af::blas_core_name();
  INFO("OpenBLAS core: " << core);
  CHECK_FALSE(core.empty());
#if defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    CHECK(core != "Prescott");
#endif
}
