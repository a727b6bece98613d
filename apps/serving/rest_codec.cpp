#include "apps/serving/rest_codec.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "apps/json_text.hpp"
#include "apps/serving/element_range.hpp"

namespace af::serving {

using json = nlohmann::json;

const char* tf_dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "DT_FLOAT";
    case dtype::f64: return "DT_DOUBLE";
    case dtype::f16: return "DT_HALF";
    case dtype::bf16: return "DT_BFLOAT16";
    case dtype::i8: return "DT_INT8";
    case dtype::u8: return "DT_UINT8";
    case dtype::i32: return "DT_INT32";
    case dtype::i64: return "DT_INT64";
    case dtype::boolean: return "DT_BOOL";
    case dtype::string: return "DT_STRING";
  }
  return "DT_INVALID";
}

// -- base64 ---------------------------------------------------------------------------------------

namespace {
constexpr char base64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::optional<std::string> base64_decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const char* at = std::strchr(base64_alphabet, c);
    if (c == '\0' || !at) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(at - base64_alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (bits >= 6) return std::nullopt;  // a lone sixth of a byte: truncated text
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  apps::append_base64(out, bytes);
  return out;
}

// -- JSON values to tensors -------------------------------------------------------------------------

namespace {

bool is_b64(const json& v) { return v.is_object() && v.size() == 1 && v.contains("b64") && v["b64"].is_string(); }

// The dims of a value (nested arrays), given the dims the spec still expects (for b64 leaves).
expected<shape> value_dims(const json& v, const shape& expected_rest, dtype type, const std::string& where) {
  shape dims;
  const json* at = &v;
  std::size_t depth = 0;
  for (;;) {
    if (at->is_array()) {
      dims.push_back(static_cast<int64_t>(at->size()));
      if (at->empty()) return dims;
      at = &(*at)[0];
      ++depth;
      continue;
    }
    // A string input's element is a JSON string, or {"b64": ...} for bytes that are not text.
    if (is_string(type) && (at->is_string() || is_b64(*at))) return dims;
    if (is_b64(*at)) {
      auto bytes = base64_decode((*at)["b64"].get_ref<const std::string&>());
      if (!bytes) return make_error(errc::invalid_argument, where + ": a b64 value that is not base64");
      const std::size_t elements = bytes->size() / size_of(type);
      if (bytes->size() % size_of(type) != 0)
        return make_error(errc::invalid_argument, where + ": b64 holds " + std::to_string(bytes->size()) +
                                                      " bytes, not a whole number of " + std::string{to_string(type)} + " elements");
      // The b64 bytes fill the dims the spec has left from here on; one open dim takes the rest.
      int64_t fixed = 1;
      int open = -1;
      for (std::size_t d = depth; d < expected_rest.size(); ++d) {
        if (expected_rest[d] < 0) {
          if (open >= 0) return make_error(errc::invalid_argument, where + ": b64 cannot fill two open dimensions");
          open = static_cast<int>(d);
        } else {
          fixed *= expected_rest[d];
        }
      }
      for (std::size_t d = depth; d < expected_rest.size(); ++d)
        dims.push_back(static_cast<int>(d) == open ? static_cast<int64_t>(elements) / std::max<int64_t>(fixed, 1) : expected_rest[d]);
      return dims;
    }
    if (is_string(type))
      return make_error(errc::invalid_argument, where + ": expected strings, arrays or {\"b64\": ...} for a DT_STRING input, found " +
                                                    std::string{at->type_name()});
    if (at->is_number() || at->is_boolean()) return dims;
    return make_error(errc::invalid_argument, where + ": expected numbers, booleans, arrays or {\"b64\": ...}, found " +
                                                  std::string{at->type_name()});
  }
}

// Writes `v` (of dims `dims` from index `d`) as elements of `type` at `out`; checks it is rectangular.
error fill(const json& v, const shape& dims, std::size_t d, dtype type, std::byte*& out, const std::string& where) {
  const std::size_t item = size_of(type);
  if (is_string(type) && d == dims.size()) {
    // `out` points into a string tensor's constructed std::strings.
    auto& element = *reinterpret_cast<std::string*>(out);
    if (v.is_string()) {
      element = v.get<std::string>();
    } else if (is_b64(v)) {
      auto bytes = base64_decode(v["b64"].get_ref<const std::string&>());
      if (!bytes) return make_error(errc::invalid_argument, where + ": a b64 value that is not base64");
      element = std::move(*bytes);
    } else {
      return make_error(errc::invalid_argument, where + ": expected a string or {\"b64\": ...} for a DT_STRING input, found " +
                                                    std::string{v.type_name()});
    }
    out += item;
    return {};
  }
  if (is_b64(v) && !is_string(type)) {
    auto bytes = base64_decode(v["b64"].get_ref<const std::string&>());
    int64_t want = 1;
    for (std::size_t k = d; k < dims.size(); ++k) want *= dims[k];
    if (!bytes || bytes->size() != static_cast<std::size_t>(want) * item)
      return make_error(errc::invalid_argument, where + ": b64 holds " + std::to_string(bytes ? bytes->size() : 0) +
                                                    " bytes where " + std::to_string(static_cast<std::size_t>(want) * item) + " are needed");
    std::memcpy(out, bytes->data(), bytes->size());
    out += bytes->size();
    return {};
  }
  if (d == dims.size()) {
    bool fits = true;
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fits = store_number_if_fits(out, type, static_cast<double>(v.get<uint64_t>()));
    else if (v.is_number_integer())
      fits = store_integer_if_fits(out, type, v.get<int64_t>());
    else if (v.is_number())
      fits = store_number_if_fits(out, type, v.get<double>());
    else if (v.is_boolean())
      fits = store_integer_if_fits(out, type, v.get<bool>() ? 1 : 0);
    else
      return make_error(errc::invalid_argument, where + ": expected a number, found " + std::string{v.type_name()});
    if (!fits)
      return make_error(errc::invalid_argument, where + ": " + v.dump() + " does not fit " + tf_dtype_name(type) +
                                                    (is_integral(type) ? " (a whole number in its range)" : " (it would overflow)"));
    out += item;
    return {};
  }
  if (!v.is_array() || static_cast<int64_t>(v.size()) != dims[d])
    return make_error(errc::invalid_argument, where + ": expected " + std::to_string(dims[d]) + " values at depth " + std::to_string(d) +
                                                  ", found " + (v.is_array() ? std::to_string(v.size()) + " values" : std::string{v.type_name()}));
  for (std::size_t i = 0; i < v.size(); ++i)
    if (auto e = fill(v[i], dims, d + 1, type, out, where)) return e;
  return {};
}

// The spec's dims after the rows.
shape row_dims_of(const graph::tensor_spec& spec) {
  shape rest;
  for (std::size_t d = 1; d < spec.type.dims.size(); ++d) rest.push_back(spec.type.dims[d]);
  return rest;
}

// Checks dims against the spec's (where it fixes them).
error check_dims(const shape& dims, const shape& want, const graph::tensor_spec& spec, const std::string& where) {
  bool ok = dims.size() == want.size();
  for (std::size_t d = 0; ok && d < dims.size(); ++d) ok = want[d] < 0 || want[d] == dims[d];
  if (ok) return {};
  return make_error(errc::invalid_argument,
                    where + " has shape " + to_string(graph::value_type{spec.type.type, dims}) + " where input '" + spec.name + "' is " +
                        to_string(spec.type));
}

// A body of n bytes holds at most n elements (a number takes a character, a b64 byte more than
// one): dims that claim more were fixed by a first value the rest do not follow. Checked before
// the tensor is allocated, so that such a request costs no more memory than its body.
error check_fits_body(const shape& dims, std::size_t body_bytes, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n) || n > static_cast<int64_t>(body_bytes))
      return make_error(errc::invalid_argument, where + ": shape " + to_string(dims) + " (taken from its first values) holds more elements than the " +
                                                    std::to_string(body_bytes) + "-byte request body carries");
  return {};
}

// Columnar: the whole value of one input, rows first.
expected<tensor> decode_column(const json& v, const graph::tensor_spec& spec, const std::string& where, std::size_t body_bytes) {
  AF_TRY_ASSIGN(auto dims, value_dims(v, spec.type.dims, spec.type.type, where));
  if (auto e = check_dims(dims, spec.type.dims, spec, where)) return e;
  if (auto e = check_fits_body(dims, body_bytes, where)) return e;
  AF_TRY_ASSIGN(auto t, tensor::empty(dims, spec.type.type));
  auto* out = static_cast<std::byte*>(t.raw_data());
  if (auto e = fill(v, dims, 0, spec.type.type, out, where)) return e;
  return t;
}

// Row format: one input's value in every instance, stacked.
expected<tensor> decode_rows(const json& instances, const graph::tensor_spec& spec, bool named, std::size_t body_bytes) {
  const shape rest = row_dims_of(spec);
  auto value_of = [&](std::size_t i) -> const json& { return named ? instances[i][spec.name] : instances[i]; };
  auto where_of = [&](std::size_t i) {
    return "instances[" + std::to_string(i) + "]" + (named ? "['" + spec.name + "']" : std::string{});
  };
  AF_TRY_ASSIGN(auto row, value_dims(value_of(0), rest, spec.type.type, where_of(0)));
  if (auto e = check_dims(row, rest, spec, where_of(0))) return e;
  shape dims{static_cast<int64_t>(instances.size())};
  for (int64_t d : row) dims.push_back(d);
  if (auto e = check_fits_body(dims, body_bytes, "'instances'")) return e;
  AF_TRY_ASSIGN(auto t, tensor::empty(dims, spec.type.type));
  auto* out = static_cast<std::byte*>(t.raw_data());
  for (std::size_t i = 0; i < instances.size(); ++i)
    if (auto e = fill(value_of(i), row, 0, spec.type.type, out, where_of(i)))
      return make_error(e.code, e.message + (i > 0 ? " (rows must match instances[0])" : ""));
  return t;
}

}  // namespace

error check_json_nesting(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_json_depth)
        return make_error(errc::invalid_argument, "the request body nests arrays and objects more than " + std::to_string(max_json_depth) +
                                                      " deep (at byte " + std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return {};
}

expected<rest_predict_request> decode_predict(std::string_view body, const signature_lookup& lookup) {
  if (auto e = check_json_nesting(body)) return e;
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error(errc::invalid_argument, "the request body is not valid JSON");
  if (!doc.is_object()) return make_error(errc::invalid_argument, "the request body must be a JSON object");
  rest_predict_request out;
  if (auto it = doc.find("signature_name"); it != doc.end()) {
    if (!it->is_string()) return make_error(errc::invalid_argument, "'signature_name' must be a string");
    out.signature_name = it->get<std::string>();
  }
  const bool has_instances = doc.contains("instances");
  const bool has_inputs = doc.contains("inputs");
  if (has_instances == has_inputs)
    return make_error(errc::invalid_argument, "the request must have exactly one of 'instances' (row format) or 'inputs' (columnar)");
  AF_TRY_ASSIGN(auto signature, lookup(out.signature_name));
  const auto& specs = signature->inputs;
  out.row_format = has_instances;
  if (has_instances) {
    const json& instances = doc["instances"];
    if (!instances.is_array() || instances.empty())
      return make_error(errc::invalid_argument, "'instances' must be a non-empty array");
    const bool named = instances[0].is_object() && !is_b64(instances[0]);
    if (!named && specs.size() != 1)
      return make_error(errc::invalid_argument, "the signature has " + std::to_string(specs.size()) +
                                                    " inputs: each instance must be an object naming them");
    if (named) {
      for (std::size_t i = 0; i < instances.size(); ++i) {
        if (!instances[i].is_object() || is_b64(instances[i]))
          return make_error(errc::invalid_argument, "instances[" + std::to_string(i) + "] is not an object like instances[0]");
        for (const auto& spec : specs)
          if (!instances[i].contains(spec.name))
            return make_error(errc::invalid_argument, "instances[" + std::to_string(i) + "] lacks input '" + spec.name + "'");
        if (instances[i].size() != specs.size())
          for (const auto& item : instances[i].items())
            if (const std::string& key = item.key();
                std::none_of(specs.begin(), specs.end(), [&](const graph::tensor_spec& s) { return s.name == key; }))
              return make_error(errc::invalid_argument, "instances[" + std::to_string(i) + "] names '" + key +
                                                            "', which is not an input of the signature");
      }
    }
    for (const auto& spec : specs) {
      AF_TRY_ASSIGN(auto t, decode_rows(instances, spec, named, body.size()));
      out.inputs.push_back({spec.name, std::move(t)});
    }
    return out;
  }
  const json& inputs = doc["inputs"];
  const bool named = inputs.is_object() && !is_b64(inputs);
  if (!named) {
    if (specs.size() != 1)
      return make_error(errc::invalid_argument, "the signature has " + std::to_string(specs.size()) +
                                                    " inputs: 'inputs' must be an object naming them");
    AF_TRY_ASSIGN(auto t, decode_column(inputs, specs[0], "inputs", body.size()));
    out.inputs.push_back({specs[0].name, std::move(t)});
    return out;
  }
  for (const auto& spec : specs) {
    auto it = inputs.find(spec.name);
    if (it == inputs.end()) return make_error(errc::invalid_argument, "'inputs' lacks input '" + spec.name + "'");
    AF_TRY_ASSIGN(auto t, decode_column(*it, spec, "inputs['" + spec.name + "']", body.size()));
    out.inputs.push_back({spec.name, std::move(t)});
  }
  for (const auto& item : inputs.items())
    if (const std::string& key = item.key();
        std::none_of(specs.begin(), specs.end(), [&](const graph::tensor_spec& s) { return s.name == key; }))
      return make_error(errc::invalid_argument, "'inputs' names '" + key + "', which is not an input of the signature");
  return out;
}

// -- tensors to JSON ---------------------------------------------------------------------------------

namespace {

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
bool is_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { ++i; continue; }
    std::size_t extra = 0;
    uint32_t lowest = 0, code = 0;
    if ((c & 0xe0) == 0xc0) { extra = 1; lowest = 0x80; code = c & 0x1fu; }
    else if ((c & 0xf0) == 0xe0) { extra = 2; lowest = 0x800; code = c & 0x0fu; }
    else if ((c & 0xf8) == 0xf0) { extra = 3; lowest = 0x10000; code = c & 0x07u; }
    else return false;
    if (s.size() - i <= extra) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(s[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3fu);
    }
    if (code < lowest || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

// A string element as TF Serving writes it: {"b64": ...} for an output whose name ends in
// "_bytes", otherwise a JSON string. Bytes that are not UTF-8 cannot be a JSON string, so they go
// as b64 too (TF Serving would write invalid JSON).
void append_string_element(std::string& out, const std::string& s, bool as_b64) {
  if (as_b64 || !is_utf8(s)) {
    out += "{\"b64\":\"";
    apps::append_base64(out, s);
    out += "\"}";
  } else {
    apps::append_json_string(out, s);
  }
}

// One element, the shortest text that reads back as the same value (NaN and infinities as TF
// Serving writes them).
void append_element(std::string& out, const std::byte* p, dtype type, bool as_b64) {
  char buf[40];
  auto put_float = [&](auto x) {
    if (std::isnan(x)) { out += "NaN"; return; }
    if (std::isinf(x)) { out += x > 0 ? "Infinity" : "-Infinity"; return; }
    auto r = std::to_chars(buf, buf + sizeof buf, x);
    out.append(buf, r.ptr);
  };
  switch (type) {
    case dtype::f32: { float x; std::memcpy(&x, p, 4); put_float(x); return; }
    case dtype::f64: { double x; std::memcpy(&x, p, 8); put_float(x); return; }
    case dtype::f16: case dtype::bf16: put_float(static_cast<float>(load_as_double(p, type))); return;
    case dtype::boolean: out += (*reinterpret_cast<const uint8_t*>(p) ? "true" : "false"); return;
    case dtype::i64: { int64_t x; std::memcpy(&x, p, 8); auto r = std::to_chars(buf, buf + sizeof buf, x); out.append(buf, r.ptr); return; }
    case dtype::string: append_string_element(out, *reinterpret_cast<const std::string*>(p), as_b64); return;
    default: {
      auto r = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(load_as_double(p, type)));
      out.append(buf, r.ptr);
      return;
    }
  }
}

// The elements from `p` in dims[d..] as nested arrays; advances `p`.
void append_value(std::string& out, const std::byte*& p, const shape& dims, std::size_t d, dtype type, bool as_b64) {
  if (d == dims.size()) {
    append_element(out, p, type, as_b64);
    p += size_of(type);
    return;
  }
  out += '[';
  for (int64_t i = 0; i < dims[d]; ++i) {
    if (i) out += ',';
    append_value(out, p, dims, d + 1, type, as_b64);
  }
  out += ']';
}

}  // namespace

std::string encode_predict(const prediction& answer, bool row_format) {
  const auto& outputs = answer.outputs;
  const auto& specs = answer.signature->outputs;
  std::vector<tensor> dense;
  for (const auto& t : outputs) {
    auto c = t.contiguous();
    dense.push_back(c ? std::move(*c) : t);
  }
  // TF Serving's rule: a string output named "*_bytes" holds bytes, written as {"b64": ...}.
  std::vector<bool> as_b64;
  for (const auto& spec : specs) as_b64.push_back(spec.name.ends_with("_bytes"));
  as_b64.resize(dense.size(), false);
  std::string out;
  out.reserve(64 + [&] { std::size_t n = 0; for (const auto& t : dense) n += static_cast<std::size_t>(t.numel()) * 12; return n; }());
  const bool single = dense.size() == 1;
  // One output's value, or {"name": value, ...} of every output; `value(k)` writes output k's.
  auto append_outputs = [&](const auto& value) {
    if (single) return value(0);
    out += '{';
    for (std::size_t k = 0; k < dense.size(); ++k) {
      if (k) out += ',';
      apps::append_json_string(out, specs[k].name);
      out += ':';
      value(k);
    }
    out += '}';
  };
  if (!row_format) {
    out += "{\"outputs\":";
    append_outputs([&](std::size_t k) {
      const auto* p = static_cast<const std::byte*>(dense[k].raw_data());
      append_value(out, p, dense[k].shape(), 0, dense[k].type(), as_b64[k]);
    });
    out += '}';
    return out;
  }
  out += "{\"predictions\":[";
  const int64_t rows = dense.empty() || dense[0].ndim() == 0 ? 0 : dense[0].dim(0);
  std::vector<const std::byte*> cursor;
  for (const auto& t : dense) cursor.push_back(static_cast<const std::byte*>(t.raw_data()));
  for (int64_t r = 0; r < rows; ++r) {
    if (r) out += ',';
    append_outputs([&](std::size_t k) { append_value(out, cursor[k], dense[k].shape(), 1, dense[k].type(), as_b64[k]); });
  }
  out += "]}";
  return out;
}

std::string encode_status(const std::vector<version_status>& versions) {
  json list = json::array();
  for (const auto& v : versions) {
    const bool failed = static_cast<bool>(v.status);
    list.push_back({{"version", std::to_string(v.version)},
                    {"state", to_string(v.state)},
                    {"status", {{"error_code", failed ? "UNKNOWN" : "OK"}, {"error_message", failed ? v.status.message : ""}}}});
  }
  return json{{"model_version_status", std::move(list)}}.dump();
}

std::string encode_metadata(const std::string& model, int64_t version, const std::vector<graph::signature>& signatures) {
  auto tensor_info = [](const graph::tensor_spec& spec) {
    json dims = json::array();
    for (int64_t d : spec.type.dims) dims.push_back({{"size", std::to_string(d)}, {"name", ""}});
    return json{{"dtype", tf_dtype_name(spec.type.type)},
                {"tensor_shape", {{"dim", std::move(dims)}, {"unknown_rank", false}}},
                {"name", spec.name}};
  };
  json defs = json::object();
  for (const auto& sig : signatures) {
    json inputs = json::object(), outputs = json::object();
    for (const auto& s : sig.inputs) inputs[s.name] = tensor_info(s);
    for (const auto& s : sig.outputs) outputs[s.name] = tensor_info(s);
    defs[sig.name] = {{"inputs", std::move(inputs)}, {"outputs", std::move(outputs)}, {"method_name", sig.method_name.empty() ? std::string{graph::predict_method} : sig.method_name}};
  }
  return json{{"model_spec", {{"name", model}, {"signature_name", ""}, {"version", std::to_string(version)}}},
              {"metadata", {{"signature_def", {{"signature_def", std::move(defs)}}}}}}
      .dump();
}

std::string encode_error(const std::string& message) { return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace af::serving
