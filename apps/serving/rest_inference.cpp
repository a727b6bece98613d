#include "apps/serving/rest_inference.hpp"

#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

#include "apps/json_text.hpp"
#include "apps/serving/element_range.hpp"
#include "apps/serving/rest_codec.hpp"

namespace af::serving {

using json = nlohmann::json;

namespace {

error invalid(std::string what) { return make_error(errc::invalid_argument, std::move(what)); }

// One JSON value appended to the feature, which keeps the kind of its first value.
error add_value(const json& v, feature_values& feature, const std::string& where) {
  feature_values::kind kind;
  if (v.is_boolean() || v.is_number_integer()) kind = feature_values::kind::ints;
  else if (v.is_number_float()) kind = feature_values::kind::floats;
  else if (v.is_string() || (v.is_object() && v.size() == 1 && v.contains("b64") && v["b64"].is_string())) kind = feature_values::kind::bytes;
  else return invalid(where + " has an element of unexpected JSON type " + std::string{v.type_name()});
  if (feature.what != feature_values::kind::none && feature.what != kind)
    return invalid(where + ": unexpected element type " + kind_name(kind) + " in a feature of type " + kind_name(feature.what));
  feature.what = kind;
  switch (kind) {
    case feature_values::kind::ints:
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return invalid(where + " has a uint64 element; only int64 is supported");
      feature.ints.push_back(v.is_boolean() ? int64_t{v.get<bool>()} : v.get<int64_t>());
      return {};
    case feature_values::kind::floats: {
      float f = 0;
      if (!store_number_if_fits(reinterpret_cast<std::byte*>(&f), dtype::f32, v.get<double>()))
        return invalid(where + ": " + v.dump() + " does not fit a float");
      feature.floats.push_back(f);
      return {};
    }
    case feature_values::kind::bytes:
      if (v.is_object() && !base64_decode(v["b64"].get_ref<const std::string&>()))
        return invalid(where + ": a b64 value that is not base64");
      ++feature.bytes;
      return {};
    case feature_values::kind::none: break;
  }
  return {};
}

expected<example> example_of(const json& v, const std::string& where) {
  if (!v.is_object()) return invalid(where + " must be a JSON object of features, not " + std::string{v.type_name()});
  example out;
  for (const auto& [name, content] : v.items()) {
    const std::string at = where + "['" + name + "']";
    feature_values& feature = out[name];
    if (content.is_array()) {
      for (std::size_t i = 0; i < content.size(); ++i)
        if (auto e = add_value(content[i], feature, at + "[" + std::to_string(i) + "]")) return e;
    } else if (auto e = add_value(content, feature, at)) {
      return e;
    }
  }
  return out;
}

void append_float(std::string& out, float x) {
  if (std::isnan(x)) { out += "NaN"; return; }
  if (std::isinf(x)) { out += x > 0 ? "Infinity" : "-Infinity"; return; }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  out.append(buf, r.ptr);
}

}  // namespace

expected<rest_inference_request> decode_inference(std::string_view body) {
  if (auto e = check_json_nesting(body)) return e;
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return invalid("the request body is not valid JSON");
  if (!doc.is_object()) return invalid("the request body must be a JSON object");
  rest_inference_request out;
  if (auto it = doc.find("signature_name"); it != doc.end()) {
    if (!it->is_string()) return invalid("'signature_name' must be a string");
    out.signature_name = it->get<std::string>();
  }
  if (auto it = doc.find("context"); it != doc.end()) {
    AF_TRY_ASSIGN(out.batch.context, example_of(*it, "context"));
  }
  auto examples = doc.find("examples");
  if (examples == doc.end()) return invalid("the request must have 'examples', a list of objects of features");
  if (!examples->is_array()) return invalid("'examples' must be a list");
  if (examples->empty()) return invalid("'examples' is an empty list");
  out.batch.examples.reserve(examples->size());
  for (std::size_t i = 0; i < examples->size(); ++i) {
    AF_TRY_ASSIGN(auto one, example_of((*examples)[i], "examples[" + std::to_string(i) + "]"));
    out.batch.examples.push_back(std::move(one));
  }
  return out;
}

std::string encode_classification(const inference_answer& answer) {
  std::string out = "{\"results\": [";
  for (std::size_t r = 0; r < answer.classes.size(); ++r) {
    if (r) out += ", ";
    out += '[';
    for (std::size_t c = 0; c < answer.classes[r].size(); ++c) {
      if (c) out += ", ";
      out += '[';
      apps::append_json_string(out, answer.classes[r][c].label);
      out += ", ";
      append_float(out, answer.classes[r][c].score);
      out += ']';
    }
    out += ']';
  }
  out += "]}";
  return out;
}

std::string encode_regression(const inference_answer& answer) {
  std::string out = "{\"results\": [";
  for (std::size_t i = 0; i < answer.values.size(); ++i) {
    if (i) out += ", ";
    append_float(out, answer.values[i]);
  }
  out += "]}";
  return out;
}

}  // namespace af::serving
