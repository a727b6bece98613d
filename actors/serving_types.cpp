#include "actors/serving_types.hpp"

#include <nlohmann/json.hpp>

namespace af::serving {

using json = nlohmann::json;

const char* to_string(version_state s) noexcept {
  switch (s) {
    case version_state::unknown: return "UNKNOWN";
    case version_state::start: return "START";
    case version_state::loading: return "LOADING";
    case version_state::available: return "AVAILABLE";
    case version_state::unloading: return "UNLOADING";
    case version_state::end: return "END";
  }
  return "UNKNOWN";
}

namespace {

json specs_json(const std::vector<graph::tensor_spec>& specs) {
  json out = json::array();
  for (const auto& s : specs) {
    json dims = json::array();
    for (int64_t d : s.type.dims) dims.push_back(d);
    out.push_back({{"name", s.name}, {"dtype", std::string{to_string(s.type.type)}}, {"dims", std::move(dims)}});
  }
  return out;
}

expected<std::vector<graph::tensor_spec>> specs_from(const json& list) {
  std::vector<graph::tensor_spec> out;
  for (const auto& s : list) {
    // A signature's dtype may be "string" (DT_STRING), which parse_dtype leaves out for files.
    const auto name = s.at("dtype").get<std::string>();
    AF_TRY_ASSIGN(auto type, name == to_string(dtype::string) ? expected<dtype>{dtype::string} : parse_dtype(name));
    shape dims;
    for (const auto& d : s.at("dims")) dims.push_back(d.get<int64_t>());
    out.push_back({s.at("name").get<std::string>(), graph::value_type{type, dims}});
  }
  return out;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string encode_signatures(const std::vector<graph::signature>& signatures) {
  json out = json::array();
  for (const auto& sig : signatures)
    out.push_back({{"name", sig.name}, {"function", sig.function}, {"inputs", specs_json(sig.inputs)},
                   {"outputs", specs_json(sig.outputs)}, {"captures", sig.captures}});
  return dump(out);
}

expected<std::vector<graph::signature>> decode_signatures(const std::string& text) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_array()) return make_error(errc::malformed_input, "serving: signatures that are not a JSON array");
  std::vector<graph::signature> out;
  try {
    for (const auto& s : doc) {
      graph::signature sig;
      sig.name = s.at("name").get<std::string>();
      sig.function = s.at("function").get<std::string>();
      AF_TRY_ASSIGN(sig.inputs, specs_from(s.at("inputs")));
      AF_TRY_ASSIGN(sig.outputs, specs_from(s.at("outputs")));
      sig.captures = s.at("captures").get<std::vector<std::string>>();
      out.push_back(std::move(sig));
    }
  } catch (const json::exception& e) {
    return make_error(errc::malformed_input, std::string{"serving: a signature field is missing or mistyped: "} + e.what());
  }
  return out;
}

std::string encode_statuses(const std::vector<version_status>& statuses) {
  json out = json::array();
  for (const auto& s : statuses)
    out.push_back({{"version", s.version}, {"state", static_cast<int>(s.state)}, {"code", static_cast<int>(s.status.code)},
                   {"message", s.status.message}});
  return dump(out);
}

expected<std::vector<version_status>> decode_statuses(const std::string& text) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_array()) return make_error(errc::malformed_input, "serving: statuses that are not a JSON array");
  std::vector<version_status> out;
  try {
    for (const auto& s : doc) {
      version_status v;
      v.version = s.at("version").get<int64_t>();
      v.state = static_cast<version_state>(s.at("state").get<int>());
      const int code = s.at("code").get<int>();
      if (code != 0) v.status = make_error(static_cast<errc>(code), s.at("message").get<std::string>());
      out.push_back(std::move(v));
    }
  } catch (const json::exception& e) {
    return make_error(errc::malformed_input, std::string{"serving: a status field is missing or mistyped: "} + e.what());
  }
  return out;
}

}  // namespace af::serving
