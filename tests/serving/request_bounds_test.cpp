// The bounds every decoder on the network path keeps, whatever a client sends: nesting depth,
// numbers within their dtype, shapes no larger than the body that carries them, deadlines that
// cannot overflow the clock, and the one bearer-token comparison every front end makes. The
// fast and general REST decoders must agree (tests/fuzz/fuzz_rest_predict.cpp checks it on
// arbitrary bodies; here on the cases that once differed).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "apps/serving/bearer_token.hpp"
#include "apps/serving/http_server.hpp"
#include "apps/serving/request_deadline.hpp"
#include "apps/serving/rest_codec.hpp"
#include "apps/serving/rest_fast_decode.hpp"

using namespace af;
using namespace af::serving;

namespace {

signature_lookup single_input(dtype type, shape dims) {
  auto sig = std::make_shared<const graph::signature>(
      graph::signature{"serving_default", "f", {graph::tensor_spec{"x", graph::value_type{type, std::move(dims)}}}, {}, {}});
  return [sig](const std::string&) -> expected<std::shared_ptr<const graph::signature>> { return sig; };
}

std::string refusal(std::string_view body, const signature_lookup& lookup) {
  auto r = decode_predict(body, lookup);
  REQUIRE_FALSE(r);
  CHECK(r.error_value().code == errc::invalid_argument);
  // Whatever the general path refuses, the fast path must not have accepted.
  CHECK_FALSE(decode_simple_predict(body, lookup));
  return r.error_value().message;
}

}  // namespace

TEST_CASE("a body nested deeper than the limit is refused by both decoders, naming where", "[serving][rest]") {
  const auto lookup = single_input(dtype::f32, {-1});
  const std::string deep = R"({"instances": )" + std::string(100000, '[') + "1" + std::string(100000, ']') + "}";
  CHECK_THAT(refusal(deep, lookup), Catch::Contains("more than 64 deep") && Catch::Contains("at byte 77"));
  std::string objects = R"({"instances": [)";
  for (int i = 0; i < 1000; ++i) objects += R"({"a":)";
  objects += "1" + std::string(1000, '}') + "]}";
  CHECK_THAT(refusal(objects, lookup), Catch::Contains("more than 64 deep"));
  // Brackets inside strings do not count; 63 levels of arrays under the body's object do fit.
  CHECK(decode_predict(R"({"signature_name": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "instances": [1]})",
                       lookup));
  const auto rank63 = single_input(dtype::f32, shape(std::size_t{63}, int64_t{-1}));
  const std::string fits = R"({"instances": )" + std::string(63, '[') + "1" + std::string(63, ']') + "}";
  CHECK(decode_predict(fits, rank63));
  CHECK(decode_simple_predict(fits, rank63));
}

TEST_CASE("numbers outside their input's dtype are refused by name, never cast", "[serving][rest]") {
  CHECK_THAT(refusal(R"({"instances": [300]})", single_input(dtype::u8, {-1})), Catch::Contains("300 does not fit DT_UINT8"));
  CHECK_THAT(refusal(R"({"instances": [-1]})", single_input(dtype::u8, {-1})), Catch::Contains("DT_UINT8"));
  CHECK_THAT(refusal(R"({"instances": [-129]})", single_input(dtype::i8, {-1})), Catch::Contains("DT_INT8"));
  CHECK_THAT(refusal(R"({"instances": [2147483648]})", single_input(dtype::i32, {-1})), Catch::Contains("DT_INT32"));
  CHECK_THAT(refusal(R"({"instances": [2.5]})", single_input(dtype::i32, {-1})), Catch::Contains("whole number"));
  CHECK_THAT(refusal(R"({"instances": [1e300]})", single_input(dtype::i64, {-1})), Catch::Contains("DT_INT64"));
  CHECK_THAT(refusal(R"({"instances": [18446744073709551615]})", single_input(dtype::i64, {-1})), Catch::Contains("DT_INT64"));
  CHECK_THAT(refusal(R"({"instances": [1e39]})", single_input(dtype::f32, {-1})), Catch::Contains("DT_FLOAT"));
  CHECK_THAT(refusal(R"({"instances": [70000]})", single_input(dtype::f16, {-1})), Catch::Contains("DT_HALF"));
  // What fits is stored exactly, by both paths alike.
  for (const char* body : {R"({"instances": [255, 0, 3.0]})", R"({"instances": [-0, 0, 1]})"}) {
    const auto u8 = single_input(dtype::u8, {-1});
    auto general = decode_predict(body, u8);
    REQUIRE(general);
    CHECK(general->inputs[0].value.to_vector<uint8_t>()[0] == (std::strstr(body, "255") ? 255 : 0));
  }
  const auto f32 = single_input(dtype::f32, {-1});
  auto fast = decode_simple_predict(R"({"instances": [-0, -0.0, 3.4e38]})", f32);
  auto general = decode_predict(R"({"instances": [-0, -0.0, 3.4e38]})", f32);
  REQUIRE(fast);
  REQUIRE(general);
  CHECK(std::memcmp(fast->inputs[0].value.raw_data(), general->inputs[0].value.raw_data(), 12) == 0);
  CHECK_FALSE(std::signbit(fast->inputs[0].value.to_vector<float>()[0]));
  CHECK(std::signbit(fast->inputs[0].value.to_vector<float>()[1]));
}

TEST_CASE("numbers that are not JSON are refused, never read by the fast path", "[serving][rest]") {
  const auto f32 = single_input(dtype::f32, {-1});
  for (const char* body : {R"({"instances": [01]})", R"({"instances": [1.]})", R"({"instances": [.5]})", R"({"instances": [+1]})",
                           R"({"instances": [1e]})", R"({"instances": [-]})", R"({"instances": [0x10]})"})
    CHECK_THAT(refusal(body, f32), Catch::Contains("not valid JSON"));
  // Non-ASCII in a signature name is the general decoder's to validate.
  CHECK_FALSE(decode_simple_predict("{\"signature_name\": \"\xc3\xa9\", \"instances\": [1]}", f32));
}

TEST_CASE("shapes a first row claims are checked against the body before allocating", "[serving][rest]") {
  const auto rows = single_input(dtype::f32, {-1, -1});
  std::string claim = R"({"instances": [[1,1,1,1,1,1,1,1])";
  for (int i = 0; i < 3000; ++i) claim += ",[]";
  claim += "]}";
  CHECK_THAT(refusal(claim, rows), Catch::Contains("holds more elements than the") && Catch::Contains("request body carries"));
  std::string columns = R"({"inputs": [[1,1,1,1,1,1,1,1])";
  for (int i = 0; i < 3000; ++i) columns += ",[]";
  columns += "]}";
  CHECK_THAT(refusal(columns, rows), Catch::Contains("holds more elements"));
}

TEST_CASE("a client's timeout is clamped to a day, so no number overflows the clock", "[serving][timing]") {
  const auto now = clock_type::now();
  const auto far = deadline_after(std::numeric_limits<int64_t>::max());
  CHECK(far - now >= max_request_timeout);
  CHECK(far - now < max_request_timeout + std::chrono::seconds(5));
  const auto past = deadline_after(-5);
  const auto later = clock_type::now();
  CHECK(past <= later);
  CHECK(deadline_after(250) - now >= std::chrono::milliseconds(250));
}

TEST_CASE("a failure inside the server is a 500, not the client's fault", "[serving]") {
  CHECK(http_status_for(errc::internal) == 500);
  CHECK(http_status_for(errc::invalid_argument) == 400);
}

TEST_CASE("a bearer credential matches only the exact token", "[serving]") {
  CHECK(bearer_matches("Bearer abc", "abc"));
  CHECK_FALSE(bearer_matches("Bearer abcd", "abc"));
  CHECK_FALSE(bearer_matches("Bearer ab", "abc"));
  CHECK_FALSE(bearer_matches("bearer abc", "abc"));
  CHECK_FALSE(bearer_matches("Bearer ", "abc"));
  CHECK_FALSE(bearer_matches("abc", "abc"));
  CHECK_FALSE(bearer_matches("Bearer abc", ""));  // no token configured is not a token of ""
}
