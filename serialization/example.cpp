#include "serialization/example.hpp"

#include <cstring>
#include <type_traits>

#include "ops/assert.hpp"

namespace af {

namespace {

// ---- wire primitives ---------------------------------------------------------------------------

enum wire : uint8_t { varint_wire = 0, fixed64_wire = 1, len_wire = 2, start_group = 3, end_group = 4, fixed32_wire = 5 };

// Protobuf's default nesting limit; groups inside unknown fields count towards it here.
constexpr int max_group_depth = 100;

// Reads a varint at p[pos..end); false when it is cut off or longer than 10 bytes.
inline bool read_varint(const unsigned char* p, std::size_t& pos, std::size_t end, uint64_t& value) {
  if (pos < end && p[pos] < 0x80) {  // one-byte values (tags, small lengths) dominate
    value = p[pos++];
    return true;
  }
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && pos < end; shift += 7) {
    unsigned char b = p[pos++];
    if (shift == 63 && b > 1) return false;  // the 10th byte may only hold the top bit
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (b < 0x80) {
      value = v;
      return true;
    }
  }
  return false;
}

std::size_t varint_size(uint64_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline char* write_varint(char* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<char>(v);
  return out;
}

// ---- field paths for error messages (rendered only when an error happens) ---------------------

struct msg_path {
  const msg_path* parent = nullptr;
  const char* segment = nullptr;  // nullptr for the root Example
  std::string_view key;           // map key, when `keyed`
  bool keyed = false;
  long entry = -1;                // map entry index while the key is not known yet

  std::string render() const {
    std::string out = parent ? parent->render() : std::string();
    if (!segment) return out;
    if (!out.empty()) out += '.';
    out += segment;
    if (keyed) {
      out += "['";
      out += key;
      out += "']";
    } else if (entry >= 0) {
      out += "[#" + std::to_string(entry) + "]";
    }
    return out;
  }
};

// Field names of each message type, by field number (index 0 unused).
struct message_type {
  const char* names[4];
  const char* name_of(uint32_t n) const { return n < 4 && names[n] ? names[n] : nullptr; }
};
constexpr message_type example_type{{nullptr, "features", nullptr, nullptr}};
constexpr message_type features_type{{nullptr, "feature", nullptr, nullptr}};
constexpr message_type entry_type{{nullptr, "key", "value", nullptr}};
constexpr message_type feature_type{{nullptr, "bytes_list", "float_list", "int64_list"}};
constexpr message_type list_type{{nullptr, "value", nullptr, nullptr}};

std::string field_path(const msg_path& m, const message_type& t, uint32_t number) {
  std::string out = m.render();
  if (!out.empty()) out += '.';
  if (const char* n = t.name_of(number)) out += n;
  else out += "field_" + std::to_string(number);
  return out;
}

error wire_error(std::string path, const std::string& what, std::size_t offset) {
  if (path.empty()) path = "example";
  return make_error(errc::malformed_input, path + ": " + what + " at offset " + std::to_string(offset));
}

// One field of a message: its number, wire type, where its tag starts, and its value
// (the varint, or the extent of a length-delimited / fixed-size value).
struct field {
  uint32_t number = 0;
  unsigned wire_type = 0;
  std::size_t tag_offset = 0;
  uint64_t value = 0;
  std::size_t begin = 0, end = 0;
};

// Walks the fields of one message occupying [pos, end) of the Example bytes. As protobuf's parser
// does, a field of a known number but an unexpected wire type is the caller's to skip as unknown;
// a group (wire types 3/4) is skipped whole, nested groups included; an end-group tag without its
// start-group is an error.
struct cursor {
  const unsigned char* base;
  std::size_t pos, end;
  const msg_path& path;
  const message_type& type;

  // Reads the next field; false at the end of the message.
  expected<bool> next(field& f) {
    if (pos >= end) return false;
    AF_TRY(read_field(f, 0));
    return true;
  }

 private:
  expected<void> read_field(field& f, int depth) {
    f.tag_offset = pos;
    uint64_t tag;
    if (!read_varint(base, pos, end, tag)) return wire_error(path.render(), "truncated or overlong tag varint", f.tag_offset);
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire_type = static_cast<unsigned>(tag & 7);
    if (f.number == 0 || (tag >> 3) > 0x1fffffff)
      return wire_error(path.render(), "invalid field number " + std::to_string(tag >> 3), f.tag_offset);
    switch (f.wire_type) {
      case varint_wire:
        f.begin = pos;
        if (!read_varint(base, pos, end, f.value))
          return wire_error(field_path(path, type, f.number), "truncated or overlong varint", f.tag_offset);
        f.end = pos;
        return {};
      case fixed64_wire:
      case fixed32_wire: {
        std::size_t width = f.wire_type == fixed64_wire ? 8 : 4;
        if (end - pos < width)
          return wire_error(field_path(path, type, f.number),
                            std::to_string(width) + "-byte value runs past the end", f.tag_offset);
        f.begin = pos;
        pos += width;
        f.end = pos;
        return {};
      }
      case len_wire: {
        uint64_t len;
        if (!read_varint(base, pos, end, len))
          return wire_error(field_path(path, type, f.number), "truncated or overlong length varint", f.tag_offset);
        if (len > end - pos)
          return wire_error(field_path(path, type, f.number), "length " + std::to_string(len) + " runs past the end",
                            f.tag_offset);
        f.begin = pos;
        pos += static_cast<std::size_t>(len);
        f.end = pos;
        return {};
      }
      case start_group:
        return skip_group(f, depth);
      case end_group:
        return wire_error(field_path(path, type, f.number), "end-group tag without a start-group", f.tag_offset);
      default:
        return wire_error(field_path(path, type, f.number), "invalid wire type " + std::to_string(f.wire_type),
                          f.tag_offset);
    }
  }

  // Skips the fields of the group that `f` starts, up to its end-group tag of the same number.
  expected<void> skip_group(field& f, int depth) {
    if (depth >= max_group_depth)
      return wire_error(field_path(path, type, f.number),
                        "groups nested deeper than " + std::to_string(max_group_depth), f.tag_offset);
    f.begin = pos;
    for (;;) {
      if (pos >= end)
        return wire_error(field_path(path, type, f.number), "group has no end-group tag", f.tag_offset);
      const std::size_t at = pos;
      uint64_t tag;
      std::size_t probe = pos;
      if (read_varint(base, probe, end, tag) && (tag & 7) == end_group) {
        if ((tag >> 3) != f.number)
          return wire_error(field_path(path, type, f.number),
                            "group ends with the end-group tag of field " + std::to_string(tag >> 3), at);
        f.end = at;
        pos = probe;
        return {};
      }
      field inner;
      AF_TRY(read_field(inner, depth + 1));
    }
  }
};

// ---- scanning (validation + counting) ----------------------------------------------------------

// Reads the next field of a message that scan_example validated already.
bool next_validated(cursor& c, field& f) {
  auto more = c.next(f);
  return more.has_value() && *more;
}

// The wire types protobuf accepts for the `value` field of each list; any other is an unknown field.
bool holds_values(feature_kind kind, unsigned wire_type) {
  switch (kind) {
    case feature_kind::bytes_list: return wire_type == len_wire;
    case feature_kind::float_list: return wire_type == fixed32_wire || wire_type == len_wire;
    case feature_kind::int64_list: return wire_type == varint_wire || wire_type == len_wire;
    case feature_kind::none: return false;
  }
  return false;
}

// Validates one BytesList/FloatList/Int64List message and adds its value count (and byte count).
expected<void> scan_list(const unsigned char* base, std::size_t begin, std::size_t end, feature_kind kind,
                         const msg_path& path, feature_view& view) {
  cursor c{base, begin, end, path, list_type};
  field f;
  for (;;) {
    AF_TRY_ASSIGN(bool more, c.next(f));
    if (!more) return {};
    if (f.number != 1 || !holds_values(kind, f.wire_type)) continue;  // unknown: skipped by its wire type
    if (kind == feature_kind::bytes_list) {
      ++view.count;
      view.byte_count += f.end - f.begin;
    } else if (f.wire_type != len_wire) {
      ++view.count;  // one unpacked float or varint
    } else if (kind == feature_kind::float_list) {
      if ((f.end - f.begin) % 4 != 0)
        return wire_error(field_path(path, list_type, 1),
                          "packed float length " + std::to_string(f.end - f.begin) + " is not a multiple of 4",
                          f.tag_offset);
      view.count += (f.end - f.begin) / 4;
    } else {
      for (std::size_t p = f.begin; p < f.end; ++view.count) {
        std::size_t at = p;
        uint64_t ignored;
        if (!read_varint(base, p, f.end, ignored))
          return wire_error(field_path(path, list_type, 1), "truncated or overlong varint in packed int64s", at);
      }
    }
  }
}

// Validates one Feature message of the entry starting at `entry_begin`; several Feature messages of
// one entry merge into `view` as protobuf merges them.
expected<void> scan_feature(const unsigned char* base, std::size_t begin, std::size_t end, std::size_t entry_begin,
                            const msg_path& path, feature_view& view) {
  cursor c{base, begin, end, path, feature_type};
  field f;
  for (;;) {
    AF_TRY_ASSIGN(bool more, c.next(f));
    if (!more) return {};
    if (f.number < 1 || f.number > 3 || f.wire_type != len_wire) continue;
    auto kind = static_cast<feature_kind>(f.number);
    if (kind != view.kind) {  // a different member of the oneof replaces what came before
      view.kind = kind;
      view.count = 0;
      view.byte_count = 0;
      view.first_list = f.tag_offset - entry_begin;
    }
    msg_path list_path{&path, feature_type.names[f.number]};
    AF_TRY(scan_list(base, f.begin, f.end, kind, list_path, view));
  }
}

expected<void> scan_entry(const unsigned char* base, std::size_t begin, std::size_t end, const msg_path& features,
                          long index, std::vector<feature_view>& out) {
  // First the key (the last one wins), so that errors inside a value can name it even when the
  // value comes first on the wire.
  msg_path unkeyed{&features, "feature", {}, false, index};
  cursor c{base, begin, end, unkeyed, entry_type};
  field f;
  feature_view view;
  view.entry = std::string_view(reinterpret_cast<const char*>(base) + begin, end - begin);
  for (;;) {
    AF_TRY_ASSIGN(bool more, c.next(f));
    if (!more) break;
    if (f.number == 1 && f.wire_type == len_wire)
      view.name = std::string_view(reinterpret_cast<const char*>(base) + f.begin, f.end - f.begin);
  }
  // Then every value field: a message field that appears more than once is merged.
  msg_path keyed{&features, "feature", view.name, true};
  cursor values{base, begin, end, keyed, entry_type};
  while (next_validated(values, f))
    if (f.number == 2 && f.wire_type == len_wire) AF_TRY(scan_feature(base, f.begin, f.end, begin, keyed, view));
  out.push_back(view);
  return {};
}

expected<void> scan_features(const unsigned char* base, std::size_t begin, std::size_t end, const msg_path& path,
                             long& entries, std::vector<feature_view>& out) {
  cursor c{base, begin, end, path, features_type};
  field f;
  for (;;) {
    AF_TRY_ASSIGN(bool more, c.next(f));
    if (!more) return {};
    if (f.number != 1 || f.wire_type != len_wire) continue;
    AF_TRY(scan_entry(base, f.begin, f.end, path, entries++, out));
  }
}

// ---- value extraction from validated views -----------------------------------------------------

// Calls fn(wire type, begin, end, varint) for each `value` field of each list of the view's kind
// from its first counted list on, through every value field of the entry; the bytes were
// validated by scan_example.
template <class Fn>
void for_each_value_field(const feature_view& view, Fn&& fn) {
  if (view.kind == feature_kind::none) return;
  const auto* base = reinterpret_cast<const unsigned char*>(view.entry.data());
  const msg_path root;
  cursor entry{base, 0, view.entry.size(), root, entry_type};
  field value, list, item;
  while (next_validated(entry, value)) {
    if (value.number != 2 || value.wire_type != len_wire || value.end <= view.first_list) continue;
    cursor lists{base, value.begin, value.end, root, feature_type};
    while (next_validated(lists, list)) {
      if (list.tag_offset < view.first_list || list.number != static_cast<uint32_t>(view.kind) ||
          list.wire_type != len_wire)
        continue;
      cursor items{base, list.begin, list.end, root, list_type};
      while (next_validated(items, item))
        if (item.number == 1 && holds_values(view.kind, item.wire_type))
          fn(item.wire_type, base + item.begin, base + item.end, item.value);
    }
  }
}

}  // namespace

// ---- public API --------------------------------------------------------------------------------

std::string_view to_string(feature_kind k) noexcept {
  switch (k) {
    case feature_kind::bytes_list: return "bytes_list";
    case feature_kind::float_list: return "float_list";
    case feature_kind::int64_list: return "int64_list";
    case feature_kind::none: return "none";
  }
  return "none";
}

std::size_t feature::size() const noexcept {
  return std::visit(
      [](const auto& v) -> std::size_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) return 0;
        else return v.size();
      },
      values);
}

expected<void> scan_example(std::string_view bytes, std::vector<feature_view>& out) {
  out.clear();
  const auto* base = reinterpret_cast<const unsigned char*>(bytes.data());
  msg_path root;
  msg_path features{&root, "features"};
  cursor c{base, 0, bytes.size(), root, example_type};
  field f;
  long entries = 0;
  for (;;) {
    AF_TRY_ASSIGN(bool more, c.next(f));
    if (!more) return {};
    if (f.number != 1 || f.wire_type != len_wire) continue;
    AF_TRY(scan_features(base, f.begin, f.end, features, entries, out));  // a repeated field merges
  }
}

const feature_view* find_feature(const std::vector<feature_view>& views, std::string_view name) noexcept {
  for (std::size_t i = views.size(); i-- > 0;)
    if (views[i].name == name) return &views[i];
  return nullptr;
}

void copy_floats(const feature_view& view, float* out) noexcept {
  for_each_value_field(view, [&](unsigned, const unsigned char* b, const unsigned char* e, uint64_t) {
    std::size_t n = static_cast<std::size_t>(e - b);  // packed: 4n bytes; unpacked: 4
    if (n == 0) return;                                 // an empty packed field
    std::memcpy(out, b, n);                             // floats are little-endian on the wire
    out += n / 4;
  });
}

void copy_int64s(const feature_view& view, int64_t* out) noexcept {
  for_each_value_field(view, [&](unsigned wt, const unsigned char* b, const unsigned char* e, uint64_t v) {
    if (wt == varint_wire) {
      *out++ = static_cast<int64_t>(v);
      return;
    }
    std::size_t pos = 0, end = static_cast<std::size_t>(e - b);
    while (pos < end) {
      uint64_t x = 0;
      read_varint(b, pos, end, x);
      *out++ = static_cast<int64_t>(x);
    }
  });
}

void copy_bytes_concatenated(const feature_view& view, unsigned char* out) noexcept {
  for_each_value_field(view, [&](unsigned, const unsigned char* b, const unsigned char* e, uint64_t) {
    if (e == b) return;
    std::memcpy(out, b, static_cast<std::size_t>(e - b));
    out += e - b;
  });
}

void bytes_values(const feature_view& view, std::vector<std::string_view>& out) {
  for_each_value_field(view, [&](unsigned, const unsigned char* b, const unsigned char* e, uint64_t) {
    out.emplace_back(reinterpret_cast<const char*>(b), static_cast<std::size_t>(e - b));
  });
}

expected<example> decode_example(std::string_view bytes) {
  std::vector<feature_view> views;
  AF_TRY(scan_example(bytes, views));
  example ex;
  for (const auto& v : views) {
    feature f;
    switch (v.kind) {
      case feature_kind::none: break;
      case feature_kind::bytes_list: {
        std::vector<std::string_view> parts;
        parts.reserve(v.count);
        bytes_values(v, parts);
        f.values = std::vector<std::string>(parts.begin(), parts.end());
        break;
      }
      case feature_kind::float_list: {
        std::vector<float> values(v.count);
        copy_floats(v, values.data());
        f.values = std::move(values);
        break;
      }
      case feature_kind::int64_list: {
        std::vector<int64_t> values(v.count);
        copy_int64s(v, values.data());
        f.values = std::move(values);
        break;
      }
    }
    ex.features.insert_or_assign(std::string(v.name), std::move(f));  // the last entry of a key wins
  }
  return ex;
}

// ---- encoding ----------------------------------------------------------------------------------

namespace {

std::size_t packed_int64_size(const std::vector<int64_t>& values) {
  std::size_t n = 0;
  for (int64_t v : values) n += varint_size(static_cast<uint64_t>(v));
  return n;
}

// Size of the list message inside a Feature (its payload, without the Feature's tag/length).
std::size_t list_size(const feature& f, std::size_t& packed) {
  packed = 0;
  switch (f.kind()) {
    case feature_kind::none: return 0;
    case feature_kind::bytes_list: {
      std::size_t n = 0;
      for (const auto& s : std::get<1>(f.values)) n += 1 + varint_size(s.size()) + s.size();
      return n;
    }
    case feature_kind::float_list:
      packed = 4 * std::get<2>(f.values).size();
      break;
    case feature_kind::int64_list:
      packed = packed_int64_size(std::get<3>(f.values));
      break;
  }
  return packed == 0 ? 0 : 1 + varint_size(packed) + packed;  // an empty packed field is omitted
}

struct entry_sizes {
  std::size_t list, packed, feature, entry;
};

}  // namespace

void encode_example(const example& ex, std::string& out) {
  std::vector<entry_sizes> sizes;
  sizes.reserve(ex.features.size());
  std::size_t features_size = 0;
  for (const auto& [name, f] : ex.features) {
    entry_sizes s{};
    s.list = list_size(f, s.packed);
    s.feature = f.kind() == feature_kind::none ? 0 : 1 + varint_size(s.list) + s.list;
    s.entry = 1 + varint_size(name.size()) + name.size() + 1 + varint_size(s.feature) + s.feature;
    features_size += 1 + varint_size(s.entry) + s.entry;
    sizes.push_back(s);
  }
  const std::size_t total = 1 + varint_size(features_size) + features_size;
  const std::size_t start = out.size();
  out.resize(start + total);
  char* p = out.data() + start;
  *p++ = 0x0a;  // Example.features (1, length-delimited)
  p = write_varint(p, features_size);
  std::size_t i = 0;
  for (const auto& [name, f] : ex.features) {
    const entry_sizes& s = sizes[i++];
    *p++ = 0x0a;  // Features.feature map entry (1, length-delimited)
    p = write_varint(p, s.entry);
    *p++ = 0x0a;  // entry key
    p = write_varint(p, name.size());
    std::memcpy(p, name.data(), name.size());
    p += name.size();
    *p++ = 0x12;  // entry value: the Feature
    p = write_varint(p, s.feature);
    if (f.kind() == feature_kind::none) continue;
    *p++ = static_cast<char>((static_cast<unsigned>(f.kind()) << 3) | len_wire);
    p = write_varint(p, s.list);
    switch (f.kind()) {
      case feature_kind::bytes_list:
        for (const auto& v : std::get<1>(f.values)) {
          *p++ = 0x0a;
          p = write_varint(p, v.size());
          std::memcpy(p, v.data(), v.size());
          p += v.size();
        }
        break;
      case feature_kind::float_list:
        if (s.packed == 0) break;
        *p++ = 0x0a;
        p = write_varint(p, s.packed);
        std::memcpy(p, std::get<2>(f.values).data(), s.packed);
        p += s.packed;
        break;
      case feature_kind::int64_list:
        if (s.packed == 0) break;
        *p++ = 0x0a;
        p = write_varint(p, s.packed);
        for (int64_t v : std::get<3>(f.values)) p = write_varint(p, static_cast<uint64_t>(v));
        break;
      case feature_kind::none:
        break;
    }
  }
  AF_ASSERT(p == out.data() + out.size());
}

std::string encode_example(const example& ex) {
  std::string out;
  encode_example(ex, out);
  return out;
}

}  // namespace af
