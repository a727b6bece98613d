// Fuzzes the tf.train.Example parsers: decode_example, scan_example with the copy functions on its
// views, and the spec-driven example_parser (feature_spec.hpp). The input is a serialized Example.
//
// Invariants:
//   - scan_example and decode_example accept the same bytes; an error is malformed_input naming
//     the byte offset;
//   - each view's count and byte_count are exactly what the copy functions write (buffers are
//     allocated to those sizes, so ASan catches a write past them), and the decoded Example holds
//     the values of the last view of each name;
//   - a decoded Example re-encodes to bytes that decode to the same values (bit for bit, NaNs
//     included), and encoding is canonical: encode(decode(encode(x))) == encode(x);
//   - a spec made from the decoded features (fixed_len, padded and ragged var_len, chosen by a hash
//     of the input) parses, gives the decoded values, and a batch of two copies gives each tensor
//     twice; a spec asking for another list kind, or another value count, fails naming the feature.

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "ops/tensor.hpp"
#include "serialization/example.hpp"
#include "serialization/feature_spec.hpp"

namespace {

using af::dtype;
using af::feature;
using af::feature_kind;
using af::feature_view;
using af::fuzz::fail;

bool same_feature(const feature& a, const feature& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case feature_kind::none: return true;
    case feature_kind::bytes_list: return std::get<1>(a.values) == std::get<1>(b.values);
    case feature_kind::float_list: return af::fuzz::same_bits(std::get<2>(a.values), std::get<2>(b.values));
    case feature_kind::int64_list: return std::get<3>(a.values) == std::get<3>(b.values);
  }
  return false;
}

bool same_example(const af::example& a, const af::example& b) {
  if (a.features.size() != b.features.size()) return false;
  for (auto ia = a.features.begin(), ib = b.features.begin(); ia != a.features.end(); ++ia, ++ib)
    if (ia->first != ib->first || !same_feature(ia->second, ib->second)) return false;
  return true;
}

std::string describe(const feature_view& v) {
  return "feature '" + std::string(v.name) + "' (" + std::string(af::to_string(v.kind)) + ", " +
         std::to_string(v.count) + " values)";
}

// The values of a view through the copy functions, into buffers of exactly the advertised size.
feature values_of(const feature_view& v) {
  switch (v.kind) {
    case feature_kind::none:
      AF_FUZZ_CHECK(v.count == 0 && v.byte_count == 0, describe(v) + ": kind none with values");
      return {};
    case feature_kind::bytes_list: {
      std::vector<std::string_view> parts;
      af::bytes_values(v, parts);
      AF_FUZZ_CHECK(parts.size() == v.count, describe(v) + ": bytes_values gave " + std::to_string(parts.size()));
      std::string joined;
      for (auto p : parts) joined += p;
      AF_FUZZ_CHECK(joined.size() == v.byte_count, describe(v) + ": byte_count " + std::to_string(v.byte_count) +
                                               " but the values hold " + std::to_string(joined.size()));
      std::unique_ptr<unsigned char[]> flat(new unsigned char[v.byte_count]);
      af::copy_bytes_concatenated(v, flat.get());
      AF_FUZZ_CHECK(v.byte_count == 0 || std::memcmp(flat.get(), joined.data(), v.byte_count) == 0,
            describe(v) + ": copy_bytes_concatenated differs from bytes_values");
      return feature::bytes(std::vector<std::string>(parts.begin(), parts.end()));
    }
    case feature_kind::float_list: {
      std::unique_ptr<float[]> out(new float[v.count]);
      af::copy_floats(v, out.get());
      return feature::floats(std::vector<float>(out.get(), out.get() + v.count));
    }
    case feature_kind::int64_list: {
      std::unique_ptr<int64_t[]> out(new int64_t[v.count]);
      af::copy_int64s(v, out.get());
      return feature::int64s(std::vector<int64_t>(out.get(), out.get() + v.count));
    }
  }
  fail("unknown feature kind");
}

void check_views(const std::vector<feature_view>& views, const af::example& decoded) {
  std::map<std::string_view, std::size_t> last_of_name;
  for (std::size_t i = 0; i < views.size(); ++i) last_of_name[views[i].name] = i;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const feature_view& v = views[i];
    const feature values = values_of(v);
    if (last_of_name[v.name] != i) continue;
    AF_FUZZ_CHECK(af::find_feature(views, v.name) == &v, describe(v) + ": find_feature does not give the last view");
    const feature* d = decoded.find(v.name);
    AF_FUZZ_CHECK(d != nullptr && same_feature(*d, values), describe(v) + ": decode_example disagrees with the view");
  }
  AF_FUZZ_CHECK(last_of_name.size() == decoded.features.size(),
                "decode_example has " + std::to_string(decoded.features.size()) + " features, the views name " +
                    std::to_string(last_of_name.size()));
}

void check_reencoding(const af::example& decoded) {
  const std::string encoded = af::encode_example(decoded);
  auto again = af::decode_example(encoded);
  if (!again) fail("the re-encoded Example does not decode: " + again.error_value().to_string());
  AF_FUZZ_CHECK(same_example(*again, decoded), "the re-encoded Example decodes to other values");
  AF_FUZZ_CHECK(af::encode_example(*again) == encoded, "encode_example is not canonical");
  std::string appended = "prefix";
  af::encode_example(decoded, appended);
  AF_FUZZ_CHECK(appended.substr(6) == encoded, "encode_example(ex, out) does not append the encoding");
}

// ---- the spec-driven parser ---------------------------------------------------------------------

uint64_t hash_of(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

dtype dtype_for(feature_kind k) {
  return k == feature_kind::float_list ? dtype::f32 : k == feature_kind::int64_list ? dtype::i64 : dtype::u8;
}

// The bytes a parsed tensor must hold: the values back to back (bytes values concatenated).
std::string wire_values(const feature& f) {
  switch (f.kind()) {
    case feature_kind::none: return {};
    case feature_kind::bytes_list: {
      std::string out;
      for (const auto& s : std::get<1>(f.values)) out += s;
      return out;
    }
    case feature_kind::float_list: {
      const auto& v = std::get<2>(f.values);
      return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    }
    case feature_kind::int64_list: {
      const auto& v = std::get<3>(f.values);
      return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
    }
  }
  return {};
}

std::string bytes_of(const af::tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

// What a spec entry must produce: the tensor's shape and bytes (and the row length for ragged).
struct expectation {
  std::string name;
  af::shape dims;
  std::string bytes;
  bool ragged = false;
};

void check_spec_parsing(std::string_view serialized, const af::example& decoded) {
  const uint64_t seed = hash_of(serialized);
  af::feature_spec spec;
  std::vector<expectation> expected;
  int i = 0;
  for (const auto& [name, f] : decoded.features) {
    if (name.empty() || i >= 12) continue;  // a spec entry needs a name; a dozen is plenty
    const unsigned variant = (seed >> (2 * i++)) & 3;
    const std::string values = wire_values(f);
    const dtype type = dtype_for(f.kind());
    const std::size_t elem = af::size_of(type);
    const auto n = static_cast<int64_t>(values.size() / elem);
    if (f.kind() == feature_kind::none) {
      // A Feature without a list counts as missing: the default fills in.
      auto fallback = af::tensor::from_vector(std::vector<float>{1.5f, -2.0f}, {2});
      spec.push_back({name, af::fixed_len(dtype::f32, {2}, fallback)});
      expected.push_back({name, {2}, bytes_of(fallback)});
    } else if (variant == 0) {
      spec.push_back({name, af::fixed_len(type, {n})});
      expected.push_back({name, {n}, values});
    } else if (variant == 1 && f.kind() == feature_kind::bytes_list && f.size() == 1) {
      spec.push_back({name, af::fixed_len(dtype::u8, {})});  // one value of any length
      expected.push_back({name, {n}, values});
    } else if (variant <= 1) {
      const int64_t pad_to = (seed >> 40) & 1 ? n + 2 : -1;
      spec.push_back({name, af::var_len(type, af::var_len_layout::padded, pad_to, 7.0)});
      std::string padded = values;
      for (int64_t k = n; k < (pad_to < 0 ? n : pad_to); ++k) {
        char cell[8];
        af::store_from_double(cell, type, 7.0);
        padded.append(cell, elem);
      }
      expected.push_back({name, {pad_to < 0 ? n : pad_to}, padded});
    } else {
      spec.push_back({name, af::var_len(type, af::var_len_layout::ragged)});
      expected.push_back({name, {n}, values, true});
      const std::vector<int64_t> length{n};
      expected.push_back({name + "/row_lengths", {1},
                          std::string(reinterpret_cast<const char*>(length.data()), sizeof(int64_t)), true});
    }
  }
  if (!decoded.find("fuzz/absent")) {
    spec.push_back({"fuzz/absent", af::var_len(dtype::i64, af::var_len_layout::ragged)});
    expected.push_back({"fuzz/absent", {0}, {}, true});
    expected.push_back({"fuzz/absent/row_lengths", {1}, std::string(sizeof(int64_t), '\0'), true});
  }

  auto parser = af::example_parser::make(spec);
  if (!parser) fail("a spec made from the decoded features is invalid: " + parser.error_value().to_string());
  auto single = parser->parse(serialized);
  if (!single) fail("example_parser rejects an Example decode_example accepts: " + single.error_value().to_string());
  const std::string_view pair[] = {serialized, serialized};
  auto batch = parser->parse_batch(pair);
  if (!batch) fail("example_parser rejects a batch of an accepted Example: " + batch.error_value().to_string());
  AF_FUZZ_CHECK(single->fields.size() == expected.size() && batch->fields.size() == expected.size(),
        "example_parser gives " + std::to_string(single->fields.size()) + " fields, the spec wants " +
            std::to_string(expected.size()));
  for (std::size_t k = 0; k < expected.size(); ++k) {
    const expectation& want = expected[k];
    const af::tensor& one = single->fields[k].value;
    const af::tensor& two = batch->fields[k].value;
    AF_FUZZ_CHECK(single->fields[k].name == want.name, "field " + std::to_string(k) + " is " + single->fields[k].name +
                                                   ", expected " + want.name);
    AF_FUZZ_CHECK(one.shape() == want.dims && bytes_of(one) == want.bytes,
          "feature '" + want.name + "' parses to shape " + af::to_string(one.shape()) + " and other values than " +
              af::to_string(want.dims));
    af::shape batch_dims = want.dims;
    if (want.ragged) batch_dims[0] *= 2;
    else batch_dims.insert(batch_dims.begin(), 2);
    AF_FUZZ_CHECK(two.shape() == batch_dims && bytes_of(two) == want.bytes + want.bytes,
          "feature '" + want.name + "' in a batch of two has shape " + af::to_string(two.shape()) +
              " or other values, expected " + af::to_string(batch_dims));
  }

  // A spec that does not fit must fail and name the feature.
  for (const auto& [name, f] : decoded.features) {
    if (name.empty() || f.kind() == feature_kind::none) continue;
    const bool wrong_kind = (seed >> 50) & 1;
    const dtype type = dtype_for(f.kind());
    const auto n = static_cast<int64_t>(wire_values(f).size() / af::size_of(type));
    af::feature_spec bad{{name, wrong_kind ? af::fixed_len(type == dtype::f32 ? dtype::i64 : dtype::f32, {n})
                                           : af::fixed_len(type, {n + 1})}};
    auto parsed = af::parse_example(serialized, bad);
    AF_FUZZ_CHECK(!parsed && parsed.error_value().code == af::errc::malformed_input &&
              parsed.error_value().message.find("'" + name + "'") != std::string::npos,
          "a spec with the wrong " + std::string(wrong_kind ? "kind" : "count") + " for '" + name +
              "' did not fail naming it");
    break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view bytes = af::fuzz::as_chars(data, size);
  std::vector<feature_view> views;
  auto scanned = af::scan_example(bytes, views);
  auto decoded = af::decode_example(bytes);
  AF_FUZZ_CHECK(scanned.has_value() == decoded.has_value(), "scan_example and decode_example disagree on validity");
  if (!scanned) {
    const af::error& e = scanned.error_value();
    AF_FUZZ_CHECK(e.code == af::errc::malformed_input, "scan_example failed with " + e.to_string());
    AF_FUZZ_CHECK(e.message == decoded.error_value().message, "scan_example and decode_example report different errors");
    AF_FUZZ_CHECK(e.message.find(" at offset ") != std::string::npos, "the error names no offset: " + e.message);
    return 0;
  }
  check_views(views, *decoded);
  check_reencoding(*decoded);
  check_spec_parsing(bytes, *decoded);
  return 0;
}
