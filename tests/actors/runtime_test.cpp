#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"
#include "actors/runtime.hpp"

using af::tensor;

TEST_CASE("a tensor sent to an actor in the same process arrives with the same storage", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  // The echo takes a (here unused) name: CAF 0.17 dereferences a null argument tuple when a
  // function actor is spawned without arguments, which UBSan reports.
  auto echo = rt.system().spawn([](const std::string&) -> caf::behavior {
    return {[](const tensor& t) { return t; }};
  }, std::string("echo"));
  auto t = tensor::full({1024, 1024}, 1.5, af::dtype::f32);
  REQUIRE(t);
  caf::scoped_actor self{rt.system()};
  const void* received = nullptr;
  self->request(echo, std::chrono::seconds(10), *t)
      .receive([&](const tensor& back) { received = back.buffer()->data(); },
               [&](const caf::error& err) { FAIL(caf::to_string(err)); });
  CHECK(received == t->buffer()->data());
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE("a tensor view serialises as its header and its elements in row-major order", "[actors]") {
  af::runtime rt{{.scheduler_threads = 1}};
  auto base = tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto view = base.transpose();
  REQUIRE(view);
  std::vector<char> bytes;
  caf::binary_serializer sink{rt.system(), bytes};
  tensor original = *view;
  REQUIRE_FALSE(sink(original));
  tensor restored;
  caf::binary_deserializer source{rt.system(), bytes};
  REQUIRE_FALSE(source(restored));
  CHECK(restored.shape() == af::shape{3, 2});
  CHECK(restored.to_vector<int32_t>() == std::vector<int32_t>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("a truncated tensor message fails to deserialise instead of crashing", "[actors]") {
  af::runtime rt{{.scheduler_threads = 1}};
  auto t = tensor::from_vector<float>({1, 2, 3, 4});
  std::vector<char> bytes;
  caf::binary_serializer sink{rt.system(), bytes};
  REQUIRE_FALSE(sink(t));
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<char> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    caf::binary_deserializer source{rt.system(), prefix};
    tensor restored;
    CHECK(source(restored));
  }
}

TEST_CASE("af errors survive the trip through caf::error with code and context", "[actors]") {
  af::runtime rt{{.scheduler_threads = 1}};
  auto err = af::make_caf_error(af::errc::shape_mismatch, "add: [2] vs [3]");
  CHECK(rt.system().render(err).find("shape_mismatch: add: [2] vs [3]") != std::string::npos);
  auto back = af::from_caf_error(err);
  CHECK(back.code == af::errc::shape_mismatch);
  CHECK(back.message == "add: [2] vs [3]");
  CHECK(af::from_caf_error(caf::make_error(caf::sec::request_timeout)).code == af::errc::timeout);
}
