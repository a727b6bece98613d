// Fuzzes the REST predict decoders, differentially: decode_simple_predict (the fast path, no JSON
// document) and decode_predict (the general path, nlohmann) must agree on every body.
//
// Input: one byte choosing the signature the body is decoded against, then the body.
//   0 f32[-1,4]   1 u8[-1,3,2]   2 i64[-1]   3 i8[-1,2]   4 f16[-1,2]   5 bool[-1]   6 i32[-1,-1]
//   7 bf16[-1,2,2]   8 f64[-1]   9 two inputs: a f32[-1,2] and b i32[-1]
// Invariants: neither crashes, hangs or allocates past its limits on any body; when the fast path
// decodes a body, the general path decodes it too, to the same signature name, format, input
// names, dtypes, shapes and bytes; when the general path refuses a body, the fast path declined
// it; every refusal is invalid_argument (or the lookup's not_found) with a message.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "apps/serving/rest_codec.hpp"
#include "apps/serving/rest_fast_decode.hpp"
#include "fuzz_support.hpp"

namespace {

using namespace af;
using af::fuzz::fail;

graph::tensor_spec spec(std::string name, dtype type, shape dims) { return {std::move(name), {type, std::move(dims)}}; }

std::vector<std::shared_ptr<const graph::signature>> make_signatures() {
  const std::vector<std::vector<graph::tensor_spec>> inputs{
      {spec("x", dtype::f32, {-1, 4})},  {spec("x", dtype::u8, {-1, 3, 2})},   {spec("x", dtype::i64, {-1})},
      {spec("x", dtype::i8, {-1, 2})},   {spec("x", dtype::f16, {-1, 2})},     {spec("x", dtype::boolean, {-1})},
      {spec("x", dtype::i32, {-1, -1})}, {spec("x", dtype::bf16, {-1, 2, 2})}, {spec("x", dtype::f64, {-1})},
      {spec("a", dtype::f32, {-1, 2}), spec("b", dtype::i32, {-1})}};
  std::vector<std::shared_ptr<const graph::signature>> out;
  for (const auto& in : inputs) {
    auto sig = std::make_shared<graph::signature>();
    sig->name = "serving_default";
    sig->inputs = in;
    sig->outputs = {spec("y", dtype::f32, {-1})};
    out.push_back(std::move(sig));
  }
  return out;
}

bool same_bytes(const tensor& a, const tensor& b) {
  return a.type() == b.type() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const auto signatures = make_signatures();
  if (size == 0) return 0;
  const auto& sig = signatures[data[0] % signatures.size()];
  const std::string_view body = af::fuzz::as_chars(data + 1, size - 1);
  // "serving_default" and "" resolve to the signature; any other name is not_found.
  const serving::signature_lookup lookup =
      [&](const std::string& name) -> expected<std::shared_ptr<const graph::signature>> {
    if (name.empty() || name == sig->name) return sig;
    return make_error(errc::not_found, "no signature '" + name + "'");
  };

  auto fast = serving::decode_simple_predict(body, lookup);
  auto general = serving::decode_predict(body, lookup);
  if (!general) {
    const auto& e = general.error_value();
    AF_FUZZ_CHECK(e.code == errc::invalid_argument || e.code == errc::not_found, "decode_predict refused with " + e.to_string());
    AF_FUZZ_CHECK(!e.message.empty(), "decode_predict refused without a message");
    AF_FUZZ_CHECK(!fast, "the fast path decoded a body the general path refuses: " + e.to_string());
    return 0;
  }
  if (!fast) return 0;
  AF_FUZZ_CHECK(fast->signature_name == general->signature_name, "the paths disagree on signature_name");
  AF_FUZZ_CHECK(fast->row_format == general->row_format, "the paths disagree on the format");
  AF_FUZZ_CHECK(fast->inputs.size() == general->inputs.size(), "the paths decode different numbers of inputs");
  for (std::size_t i = 0; i < fast->inputs.size(); ++i) {
    AF_FUZZ_CHECK(fast->inputs[i].name == general->inputs[i].name, "the paths name input " + std::to_string(i) + " differently");
    AF_FUZZ_CHECK(same_bytes(fast->inputs[i].value, general->inputs[i].value),
                  "the paths decode input '" + fast->inputs[i].name + "' differently: " + to_string(fast->inputs[i].value.shape()) +
                      " vs " + to_string(general->inputs[i].value.shape()));
  }
  return 0;
}
