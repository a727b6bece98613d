#include "serialization/feature_spec.hpp"

#include <algorithm>
#include <cstring>

namespace af {

namespace {

std::string quoted(std::string_view name) {
  std::string out(1, '\'');
  out += name;
  out += '\'';
  return out;
}

// Bytes features are measured in bytes, numeric ones in values.
std::size_t amount(const feature_view& v) {
  return v.kind == feature_kind::bytes_list ? v.byte_count : v.count;
}

// Copies a validated view's values to dst (f32, i64 or u8 according to its kind).
void copy_view(const feature_view& v, void* dst) {
  switch (v.kind) {
    case feature_kind::float_list: copy_floats(v, static_cast<float*>(dst)); break;
    case feature_kind::int64_list: copy_int64s(v, static_cast<int64_t*>(dst)); break;
    case feature_kind::bytes_list: copy_bytes_concatenated(v, static_cast<unsigned char*>(dst)); break;
    case feature_kind::none: break;
  }
}

error bad(const std::string& where, const std::string& what) {
  return make_error(errc::malformed_input, where + what);
}

}  // namespace

feature_def fixed_len(dtype type, af::shape dims, std::optional<tensor> default_value) {
  feature_def d;
  d.fixed = true;
  d.type = type;
  d.dims = std::move(dims);
  d.default_value = std::move(default_value);
  return d;
}

feature_def var_len(dtype type, var_len_layout layout, int64_t pad_to, double pad_value) {
  feature_def d;
  d.fixed = false;
  d.type = type;
  d.layout = layout;
  d.pad_to = pad_to;
  d.pad_value = pad_value;
  return d;
}

expected<feature_kind> wanted_kind(dtype type) {
  switch (type) {
    case dtype::f32: return feature_kind::float_list;
    case dtype::i64: return feature_kind::int64_list;
    case dtype::u8: return feature_kind::bytes_list;
    default:
      return make_error(errc::dtype_mismatch, "an Example feature parses to f32 (float_list), i64 (int64_list) "
                                              "or u8 (bytes_list), not " + std::string(to_string(type)));
  }
}

expected<void> validate(const feature_spec& spec) {
  for (std::size_t i = 0; i < spec.size(); ++i) {
    const auto& [name, def] = spec[i];
    const std::string who = "feature spec " + quoted(name) + ": ";
    if (name.empty()) return make_error(errc::invalid_argument, "feature spec entry " + std::to_string(i) + " has no name");
    for (std::size_t j = 0; j < i; ++j)
      if (spec[j].name == name) return make_error(errc::invalid_argument, who + "named twice");
    auto kind = wanted_kind(def.type);
    if (!kind) return make_error(kind.error_value().code, who + kind.error_value().message);
    if (def.fixed) {
      for (int64_t d : def.dims)
        if (d < 0) return make_error(errc::invalid_argument, who + "negative dimension in " + to_string(def.dims));
      if (def.default_value) {
        const tensor& t = *def.default_value;
        if (!t.defined() || t.type() != def.type)
          return make_error(errc::dtype_mismatch, who + "default must be a " + std::string(to_string(def.type)) + " tensor");
        bool bytes_any_length = def.type == dtype::u8 && def.dims.empty();
        if (bytes_any_length ? t.ndim() != 1 : t.numel() != numel(def.dims))
          return make_error(errc::shape_mismatch, who + "default has shape " + to_string(t.shape()) +
                                                      ", spec shape is " + to_string(def.dims));
      }
    } else if (def.pad_to < -1) {
      return make_error(errc::invalid_argument, who + "pad_to must be -1 (longest row) or a length");
    }
  }
  return {};
}

expected<example_parser> example_parser::make(feature_spec spec) {
  AF_TRY(validate(spec));
  for (auto& entry : spec)  // defaults are copied with one memcpy per example: make them contiguous
    if (entry.def.default_value) {
      AF_TRY_ASSIGN(tensor dense, entry.def.default_value->contiguous());
      entry.def.default_value = std::move(dense);
    }
  return example_parser(std::move(spec));
}

expected<element> example_parser::parse(std::string_view serialized) {
  return parse_many(std::span<const std::string_view>(&serialized, 1), false);
}

expected<element> example_parser::parse_batch(std::span<const std::string_view> serialized) {
  return parse_many(serialized, true);
}

expected<element> example_parser::parse_many(std::span<const std::string_view> input, bool batched) {
  const std::size_t batch = input.size(), entries = spec_.size();
  const auto batch_dim = static_cast<int64_t>(batch);
  auto where = [&](std::size_t b) { return batched ? "example " + std::to_string(b) + ": " : std::string(); };

  // Pass 1: validate every Example and find each spec feature in it; nothing is allocated per
  // value, so a bad example in a batch costs no tensor allocation.
  matched_.assign(batch * entries, feature_view{});
  for (std::size_t b = 0; b < batch; ++b) {
    if (auto scanned = scan_example(input[b], views_); !scanned)
      return make_error(scanned.error_value().code, where(b) + scanned.error_value().message);
    for (std::size_t e = 0; e < entries; ++e) {
      const feature_view* v = find_feature(views_, spec_[e].name);
      if (!v || v->kind == feature_kind::none) continue;  // missing: kind none in matched_
      const feature_kind want = *wanted_kind(spec_[e].def.type);
      if (v->kind != want)
        return bad(where(b), "feature " + quoted(spec_[e].name) + " is " + std::string(to_string(v->kind)) +
                                 ", spec wants " + std::string(to_string(want)));
      matched_[b * entries + e] = *v;
    }
  }

  // Pass 2: size, allocate and fill one tensor (two for ragged) per spec entry.
  element out;
  out.fields.reserve(entries + 1);
  for (std::size_t e = 0; e < entries; ++e) {
    const std::string& name = spec_[e].name;
    const feature_def& def = spec_[e].def;
    const std::size_t elem = size_of(def.type);
    auto view = [&](std::size_t b) -> const feature_view& { return matched_[b * entries + e]; };
    auto present = [&](std::size_t b) { return view(b).kind != feature_kind::none; };

    if (def.fixed) {
      // Per example: `row` values (or bytes), the same for every example of the batch.
      const bool bytes_any_length = def.type == dtype::u8 && def.dims.empty();
      std::size_t row = static_cast<std::size_t>(numel(def.dims));
      for (std::size_t b = 0; b < batch; ++b) {
        std::size_t have;
        if (!present(b)) {
          if (!def.default_value) return bad(where(b), "missing feature " + quoted(name));
          have = static_cast<std::size_t>(def.default_value->numel());
        } else if (bytes_any_length) {
          if (view(b).count != 1)
            return bad(where(b), "feature " + quoted(name) + " has " + std::to_string(view(b).count) +
                                     " bytes values, fixed_len u8 with shape [] wants exactly 1");
          have = view(b).byte_count;
        } else {
          have = amount(view(b));
          if (have != row)
            return bad(where(b), "feature " + quoted(name) + " has " + std::to_string(have) +
                                     (def.type == dtype::u8 ? " bytes" : " values") + ", spec wants " +
                                     std::to_string(row) + " (fixed_len " + std::string(to_string(def.type)) +
                                     " shape " + to_string(def.dims) + ")");
        }
        if (bytes_any_length) {
          if (b == 0) row = have;
          else if (have != row)
            return bad(where(b), "feature " + quoted(name) + " has " + std::to_string(have) + " bytes but example 0 has " +
                                     std::to_string(row) + ": fixed_len u8 with shape [] needs equal lengths in a batch");
        }
      }
      af::shape dims = bytes_any_length ? af::shape{static_cast<int64_t>(row)} : def.dims;
      if (batched) dims.insert(dims.begin(), batch_dim);
      AF_TRY_ASSIGN(tensor t, tensor::empty(dims, def.type));
      auto* dst = static_cast<unsigned char*>(t.raw_data());
      for (std::size_t b = 0; b < batch; ++b, dst += row * elem) {
        if (present(b)) copy_view(view(b), dst);
        else if (row > 0) std::memcpy(dst, def.default_value->raw_data(), row * elem);
      }
      out.fields.push_back({name, std::move(t)});
      continue;
    }

    std::size_t longest = 0, total = 0;
    for (std::size_t b = 0; b < batch; ++b) {
      std::size_t n = present(b) ? amount(view(b)) : 0;
      if (def.layout == var_len_layout::padded && def.pad_to >= 0 && n > static_cast<std::size_t>(def.pad_to))
        return bad(where(b), "feature " + quoted(name) + " has " + std::to_string(n) + " values, more than pad_to " +
                                 std::to_string(def.pad_to));
      longest = std::max(longest, n);
      total += n;
    }
    if (def.layout == var_len_layout::padded) {
      const std::size_t width = def.pad_to >= 0 ? static_cast<std::size_t>(def.pad_to) : longest;
      af::shape dims{static_cast<int64_t>(width)};
      if (batched) dims.insert(dims.begin(), batch_dim);
      AF_TRY_ASSIGN(tensor t, tensor::empty(dims, def.type));
      auto* dst = static_cast<unsigned char*>(t.raw_data());
      for (std::size_t b = 0; b < batch; ++b, dst += width * elem) {
        std::size_t n = present(b) ? amount(view(b)) : 0;
        if (n > 0) copy_view(view(b), dst);
        for (std::size_t i = n; i < width; ++i) store_from_double(dst + i * elem, def.type, def.pad_value);
      }
      out.fields.push_back({name, std::move(t)});
    } else {
      AF_TRY_ASSIGN(tensor values, tensor::empty({static_cast<int64_t>(total)}, def.type));
      AF_TRY_ASSIGN(tensor lengths, tensor::empty({batch_dim}, dtype::i64));
      auto* dst = static_cast<unsigned char*>(values.raw_data());
      auto* len = lengths.data<int64_t>();
      for (std::size_t b = 0; b < batch; ++b) {
        std::size_t n = present(b) ? amount(view(b)) : 0;
        if (n > 0) copy_view(view(b), dst);
        dst += n * elem;
        len[b] = static_cast<int64_t>(n);
      }
      out.fields.push_back({name, std::move(values)});
      out.fields.push_back({name + "/row_lengths", std::move(lengths)});
    }
  }
  return out;
}

expected<element> parse_example(std::string_view serialized, const feature_spec& spec) {
  AF_TRY_ASSIGN(example_parser parser, example_parser::make(spec));
  return parser.parse(serialized);
}

expected<element> parse_examples(std::span<const std::string_view> serialized, const feature_spec& spec) {
  AF_TRY_ASSIGN(example_parser parser, example_parser::make(spec));
  return parser.parse_batch(serialized);
}

}  // namespace af
