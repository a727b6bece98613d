// Fuzzes the REST predict decoders, differentially: decode_simple_predict (the fast path, no JSON
// document) and decode_predict (the general path, nlohmann) must agree on every body.
//
// Input: one byte choosing the signature the body is decoded against, then the body.
//   0 f32[-1,4]   1 u8[-1,3,2]   2 i64[-1]   3 i8[-1,2]   4 f16[-1,2]   5 bool[-1]   6 i32[-1,-1]
//   7 bf16[-1,2,2]   8 f64[-1]   9 two inputs: a f32[-1,2] and b i32[-1]   10 string[-1]
//   11 two inputs: a f32[-1,2] and key string[-1, 2]
// Invariants: neither crashes, hangs or allocates past its limits on any body; when the fast path
// decodes a body, the general path decodes it too, to the same signature name, format, input
// names, dtypes, shapes and bytes; when the general path refuses a body, the fast path declined
// it; every refusal is invalid_argument (or the lookup's not_found) with a message. The fast path
// never decodes strings. Decoded strings, written back as outputs (as text or b64, and as b64
// under a "*_bytes" name), are valid JSON that reads back to the same bytes.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/serving/model_server.hpp"
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
      {spec("a", dtype::f32, {-1, 2}), spec("b", dtype::i32, {-1})},
      {spec("x", dtype::string, {-1})},
      {spec("a", dtype::f32, {-1, 2}), spec("key", dtype::string, {-1, 2})}};
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

// The strings of a REST output value, in row-major order: text as its bytes, {"b64": ...} decoded.
bool collect_strings(const nlohmann::json& v, std::vector<std::string>& out) {
  if (v.is_array()) {
    for (const auto& e : v)
      if (!collect_strings(e, out)) return false;
    return true;
  }
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return true;
  }
  if (v.is_object() && v.contains("b64") && v["b64"].is_string()) {
    auto bytes = serving::base64_decode(v["b64"].get<std::string>());
    if (!bytes) return false;
    out.push_back(std::move(*bytes));
    return true;
  }
  return false;
}

// Writes the decoded string inputs back as outputs, under their name and under name + "_bytes",
// and checks the JSON reads back to the same bytes (b64 always under "_bytes").
void check_strings_round_trip(const std::vector<named_tensor>& inputs) {
  auto sig = std::make_shared<graph::signature>();
  serving::prediction answer;
  for (const auto& in : inputs) {
    if (!is_string(in.value.type())) continue;
    for (const std::string& name : {in.name, in.name + "_bytes"}) {
      sig->outputs.push_back({name, {dtype::string, in.value.shape()}});
      answer.outputs.push_back(in.value);
    }
  }
  if (answer.outputs.empty()) return;
  answer.signature = sig;
  const std::string text = serving::encode_predict(answer, /*row_format=*/false);
  const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  AF_FUZZ_CHECK(!doc.is_discarded(), "encode_predict wrote strings as invalid JSON: " + text.substr(0, 200));
  const auto& outputs = doc["outputs"];
  for (std::size_t k = 0; k < answer.outputs.size(); ++k) {
    const auto& name = sig->outputs[k].name;
    const auto& value = answer.outputs.size() == 1 ? outputs : outputs[name];
    std::vector<std::string> back;
    AF_FUZZ_CHECK(collect_strings(value, back), "output '" + name + "' is not strings and b64 objects");
    AF_FUZZ_CHECK(back == answer.outputs[k].to_vector<std::string>(), "output '" + name + "' does not read back to its bytes");
    if (name.ends_with("_bytes")) AF_FUZZ_CHECK(value.dump().find("\"b64\"") != std::string::npos || back.empty(), "'" + name + "' is not b64");
  }
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
  check_strings_round_trip(general->inputs);
  if (!fast) return 0;
  for (const auto& in : fast->inputs) AF_FUZZ_CHECK(!is_string(in.value.type()), "the fast path decoded strings");
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
