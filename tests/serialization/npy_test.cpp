// .npy files: every dtype NumPy and we share round-trips, headers as NumPy writes them (versions 1
// and 2) are read, and bad files are refused naming the problem, never a crash.

#include <catch2/catch.hpp>

#include <random>

#include "ops/random.hpp"
#include "serialization/npy.hpp"

using namespace af;

namespace {

// A .npy file as NumPy lays it out: magic, version, header length, dict literal padded with spaces
// to a multiple of 64 bytes and ended by a newline, then the data.
std::string numpy_style(const std::string& dict, std::string_view data, int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string{data};
}

}  // namespace

TEST_CASE("npy: every shared dtype and shape round-trips", "[npy]") {
  const std::vector<tensor> values = {
      random_normal({2, 3}, 1).value(),
      random_normal({4}, 2, dtype::f64).value(),
      tensor::from_vector<int64_t>({1, -2, 3}),
      tensor::from_vector<int32_t>({7, 8, 9, 10}, {2, 2}),
      tensor::scalar<float>(2.5f),
      tensor::zeros({0, 4}, dtype::u8).value(),
      tensor::from_vector<int8_t>({-1, 2}),
      random_normal({3}, 3, dtype::f16).value(),
  };
  for (const auto& t : values) {
    INFO(to_string(t.type()) << to_string(t.shape()));
    auto bytes = npy::encode(t);
    REQUIRE(bytes);
    CHECK(bytes->find("'fortran_order': False") != std::string::npos);
    CHECK((bytes->size() - t.nbytes()) % 64 == 0);  // the data starts 64-byte aligned, as NumPy's
    auto back = npy::decode(*bytes);
    REQUIRE(back);
    CHECK(back->type() == t.type());
    CHECK(back->shape() == t.shape());
    CHECK(std::string_view(static_cast<const char*>(back->raw_data()), back->nbytes()) ==
          std::string_view(static_cast<const char*>(t.raw_data()), t.nbytes()));
  }
  CHECK(npy::encode(tensor::from_vector<int64_t>({1, 2, 3}))->find("'shape': (3,)") != std::string::npos);
  CHECK(npy::encode(tensor::scalar<float>(1))->find("'shape': ()") != std::string::npos);
}

TEST_CASE("npy: headers as NumPy writes them are read, versions 1 and 2", "[npy]") {
  const float data[6] = {0, 1, 2, 3, 4, 5};
  const std::string_view raw{reinterpret_cast<const char*>(data), sizeof data};
  for (int major : {1, 2}) {
    auto t = npy::decode(numpy_style("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", raw, major));
    REQUIRE(t);
    CHECK(t->shape() == shape{2, 3});
    CHECK(t->to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  }
  auto flags = npy::decode(numpy_style("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string{"\x01\x00\x07", 3}));
  REQUIRE(flags);
  CHECK(flags->type() == dtype::boolean);
  CHECK(static_cast<const uint8_t*>(flags->raw_data())[2] == 1);  // nonzero is true, stored as 1
}

TEST_CASE("npy: bad files are refused naming what is wrong", "[npy]") {
  const std::string four_floats(16, '\0');
  auto refuse = [](const std::string& bytes, const std::string& expected) {
    auto t = npy::decode(bytes, "in.npy");
    REQUIRE_FALSE(t);
    INFO(t.error_value().message);
    CHECK(t.error_value().message.rfind("in.npy", 0) == 0);
    CHECK(t.error_value().message.find(expected) != std::string::npos);
  };
  refuse("PK\x03\x04 not numpy", "magic");
  refuse(numpy_style("{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }", four_floats), "Fortran order");
  refuse(numpy_style("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", four_floats), "big-endian");
  refuse(numpy_style("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", four_floats), "'<c8'");
  refuse(numpy_style("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four_floats), "truncated");
  refuse(numpy_style("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", four_floats), "non-negative");
  refuse(numpy_style("{'descr': '<f4', 'shape': (4,), }", four_floats), "lacks");
  refuse(numpy_style("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four_floats).substr(0, 40), "truncated");
  CHECK_FALSE(npy::encode(tensor::zeros({2}, dtype::bf16).value()));
}

TEST_CASE("npy: 2000 random corruptions are each refused or read, never a crash", "[npy]") {
  const std::string good = npy::encode(random_normal({3, 5}, 7).value()).value();
  std::mt19937_64 rng{6};
  int refused = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string bytes = good;
    switch (rng() % 3) {
      case 0: bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255); break;
      case 1: bytes.resize(rng() % bytes.size()); break;
      case 2: bytes.insert(rng() % bytes.size(), 1, static_cast<char>(rng())); break;
    }
    auto t = npy::decode(bytes);
    if (!t) {
      ++refused;
      CHECK_FALSE(t.error_value().message.empty());
    } else {
      CHECK(t->nbytes() <= bytes.size());
    }
  }
  CHECK(refused > 500);
}
