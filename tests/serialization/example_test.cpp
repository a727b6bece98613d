#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/protobuf_wire.hpp"
#include "serialization/example.hpp"

using af::errc;
using af::example;
using af::feature;
using af::feature_kind;

namespace {

// Wire bytes written by hand here (not with our encoder), so the decoder is checked against the
// protobuf rules themselves.
using af::testing::wire::len_field;
using af::testing::wire::tag;
using af::testing::wire::varint;
std::string fixed32_field(uint32_t field, float v) {
  std::string out = tag(field, 5);
  char bytes[4];
  std::memcpy(bytes, &v, 4);
  return out.append(bytes, 4);
}
std::string varint_field(uint32_t field, uint64_t v) { return tag(field, 0) + varint(v); }
std::string entry(const std::string& key, const std::string& feature_msg) {
  return len_field(1, len_field(1, key) + len_field(2, feature_msg));
}
std::string example_of(const std::string& entries) { return len_field(1, entries); }

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

example sample() {
  example ex;
  ex.features["image"] = feature::bytes({std::string(3072, '\x7f')});
  ex.features["label"] = feature::int64s({7});
  ex.features["scores"] = feature::floats({0.5f, -1.25f, std::numeric_limits<float>::max(),
                                           std::numeric_limits<float>::denorm_min(), -0.0f});
  ex.features["ids"] = feature::int64s({0, -1, 127, 128, int64_t{1} << 40, std::numeric_limits<int64_t>::min(),
                                        std::numeric_limits<int64_t>::max()});
  ex.features["tags"] = feature::bytes({"cat", "", std::string("\xff\x00z", 3)});
  ex.features["empty_floats"] = feature::floats({});
  ex.features["empty_bytes"] = feature::bytes({});
  ex.features["unset"] = feature{};
  return ex;
}

}  // namespace

TEST_CASE("an Example survives encode then decode, every kind and edge value included", "[cpu]") {
  example ex = sample();
  std::string wire = af::encode_example(ex);
  auto back = af::decode_example(wire);
  REQUIRE(back.has_value());
  CHECK(*back == ex);
  CHECK(back->find("unset")->kind() == feature_kind::none);
  CHECK(back->find("image")->size() == 1);
  CHECK(std::signbit(std::get<std::vector<float>>(back->find("scores")->values)[4]));

  CHECK(af::encode_example(example{}) == std::string("\x0a\x00", 2));
  auto empty = af::decode_example("");
  REQUIRE(empty.has_value());
  CHECK(empty->features.empty());

  std::string appended = "prefix";
  af::encode_example(ex, appended);
  CHECK(appended == "prefix" + wire);
}

TEST_CASE("encoding is canonical: TensorFlow's bytes for each entry, entries in name order", "[cpu]") {
  // Entries taken from TensorFlow 2.21's SerializeToString of the same Example (which orders map
  // entries by its hash map); canonical order sorts them by name.
  const std::string a = "0a0a0a016112051a030a0101";                // 'a': int64_list [1]
  const std::string b = "0a0d0a016212080a060a0278790a00";          // 'b': bytes_list ["xy", ""]
  const std::string f = "0a110a0166120c120a0a080000803f000000c0";  // 'f': float_list [1, -2], packed
  const std::string n = "0a050a016e1200";                          // 'n': a Feature with no list
  example ex;
  ex.features["a"] = feature::int64s({1});
  ex.features["b"] = feature::bytes({"xy", ""});
  ex.features["f"] = feature::floats({1.0f, -2.0f});
  ex.features["n"] = feature{};
  CHECK(af::encode_example(ex) == from_hex("0a35" + a + b + f + n));
  // And TensorFlow's own order decodes to the same Example.
  auto tf_order = af::decode_example(from_hex("0a35" + f + a + n + b));
  REQUIRE(tf_order.has_value());
  CHECK(*tf_order == ex);
}

TEST_CASE("unpacked repeated values, unknown fields and any field order decode as protobuf says", "[cpu]") {
  // FloatList with unpacked values and a packed run mixed, an unknown varint field in between.
  std::string floats = fixed32_field(1, 1.5f) + varint_field(9, 12345) + fixed32_field(1, -2.0f);
  float packed[2] = {3.0f, 4.0f};
  floats += len_field(1, std::string(reinterpret_cast<const char*>(packed), 8));
  // Int64List unpacked, including a negative (10-byte varint), then packed.
  std::string ints = varint_field(1, 5) + varint_field(1, static_cast<uint64_t>(int64_t{-3})) +
                     len_field(1, varint(300) + varint(1)) + tag(7, 1) + std::string(8, '\x01');
  std::string bytes_list = len_field(1, "x") + len_field(5, "ignored") + len_field(1, "yz");

  std::string entries;
  // Value before key in the map entry, an unknown field in the entry and one in the Feature.
  entries += len_field(1, len_field(2, fixed32_field(15, 1.0f) + len_field(2, floats)) + varint_field(3, 1) +
                              len_field(1, "floats"));
  entries += entry("ints", len_field(3, ints));
  entries += entry("bytes", len_field(1, bytes_list));
  std::string wire = varint_field(4, 99) + example_of(entries) + len_field(2, "unknown in Example");

  auto ex = af::decode_example(wire);
  INFO((ex ? std::string() : ex.error_value().message));
  REQUIRE(ex.has_value());
  CHECK(ex->find("floats")->values == feature::floats({1.5f, -2.0f, 3.0f, 4.0f}).values);
  CHECK(ex->find("ints")->values == feature::int64s({5, -3, 300, 1}).values);
  CHECK(ex->find("bytes")->values == feature::bytes({"x", "yz"}).values);
}

TEST_CASE("repeated messages merge, a repeated key keeps its last entry, the last list kind wins", "[cpu]") {
  std::string wire = example_of(entry("k", len_field(3, varint_field(1, 1)))) +
                     example_of(entry("other", len_field(1, len_field(1, "o"))) +
                                entry("k", len_field(3, varint_field(1, 2))));
  auto ex = af::decode_example(wire);
  REQUIRE(ex.has_value());
  CHECK(ex->features.size() == 2);
  CHECK(ex->find("k")->values == feature::int64s({2}).values);

  // Two int64_list fields in one Feature concatenate; a later float_list replaces them.
  std::string merged = len_field(3, varint_field(1, 1)) + len_field(3, varint_field(1, 2));
  auto m = af::decode_example(example_of(entry("m", merged)));
  REQUIRE(m.has_value());
  CHECK(m->find("m")->values == feature::int64s({1, 2}).values);
  auto switched = af::decode_example(example_of(entry("m", merged + len_field(2, fixed32_field(1, 9.0f)))));
  REQUIRE(switched.has_value());
  CHECK(switched->find("m")->values == feature::floats({9.0f}).values);
}

TEST_CASE("a map entry's value field given twice merges: lists append, another kind replaces", "[cpu]") {
  // protobuf merges a message field that appears more than once; keeping only the last Feature
  // would drop values silently.
  auto two_values = [](const std::string& key, const std::string& first, const std::string& second) {
    return example_of(len_field(1, len_field(1, key) + len_field(2, first) + len_field(2, second)));
  };
  auto floats = af::decode_example(two_values("f", len_field(2, fixed32_field(1, 1.0f) + fixed32_field(1, 2.0f)),
                                              len_field(2, fixed32_field(1, 3.0f))));
  REQUIRE(floats.has_value());
  CHECK(floats->find("f")->values == feature::floats({1.0f, 2.0f, 3.0f}).values);

  auto bytes = af::decode_example(two_values("b", len_field(1, len_field(1, "x")), len_field(1, len_field(1, "yz"))));
  REQUIRE(bytes.has_value());
  CHECK(bytes->find("b")->values == feature::bytes({"x", "yz"}).values);

  // The second Feature holds another member of the oneof: it replaces the first.
  auto replaced = af::decode_example(two_values("r", len_field(3, varint_field(1, 4)), len_field(2, fixed32_field(1, 5.0f))));
  REQUIRE(replaced.has_value());
  CHECK(replaced->find("r")->values == feature::floats({5.0f}).values);

  // An empty second Feature changes nothing; the key may sit between or after the values.
  std::string ints = len_field(3, varint_field(1, 7) + len_field(1, varint(8) + varint(9)));
  auto keyed_between = af::decode_example(
      example_of(len_field(1, len_field(2, ints) + len_field(1, "i") + len_field(2, "") + len_field(2, len_field(3, varint_field(1, 10))))));
  REQUIRE(keyed_between.has_value());
  CHECK(keyed_between->find("i")->values == feature::int64s({7, 8, 9, 10}).values);

  // Views copy the same merged values, and count them.
  std::vector<af::feature_view> views;
  const std::string wire = two_values("f", len_field(2, fixed32_field(1, 1.0f)), len_field(2, fixed32_field(1, 3.0f)));
  REQUIRE(af::scan_example(wire, views));
  REQUIRE(views.size() == 1);
  CHECK(views[0].count == 2);
  float copied[2] = {};
  af::copy_floats(views[0], copied);
  CHECK(copied[0] == 1.0f);
  CHECK(copied[1] == 3.0f);
}

TEST_CASE("groups and known fields of an unexpected wire type are unknown fields, skipped", "[cpu]") {
  // A group, nested groups included, at every level of the message tree.
  const std::string group = tag(20, 3) + varint_field(1, 5) + tag(21, 3) + len_field(2, "in") + tag(21, 4) +
                            fixed32_field(3, 1.0f) + tag(20, 4);
  std::string values = group + fixed32_field(1, 1.5f) + group + fixed32_field(1, 2.5f);
  std::string feature_msg = group + len_field(2, values) + group;
  std::string entry_msg = group + len_field(1, "f") + group + len_field(2, feature_msg) + group;
  auto grouped = af::decode_example(group + len_field(1, group + len_field(1, entry_msg) + group) + group);
  INFO((grouped ? std::string() : grouped.error_value().message));
  REQUIRE(grouped.has_value());
  CHECK(grouped->find("f")->values == feature::floats({1.5f, 2.5f}).values);

  // Known field numbers with wire types their declared types cannot have: skipped, not errors.
  const std::string odd_values = varint_field(1, 7) + fixed32_field(1, 0.5f) + tag(1, 1) + std::string(8, '\x02');
  std::string odd = varint_field(1, 5) +                              // Example.features as a varint
                    len_field(1, fixed32_field(1, 1.0f) +             // Features.feature as a float
                                     len_field(1, varint_field(1, 3) +  // key as a varint
                                                      len_field(1, "k") + fixed32_field(2, 2.0f) +  // value as a float
                                                      len_field(2, varint_field(3, 1) +             // int64_list as a varint
                                                                       len_field(3, odd_values))));
  auto skipped = af::decode_example(odd);
  INFO((skipped ? std::string() : skipped.error_value().message));
  REQUIRE(skipped.has_value());
  REQUIRE(skipped->features.size() == 1);
  // Only the varint 7 is an int64 value; the float and the 64-bit field are unknown to Int64List.
  CHECK(skipped->find("k")->values == feature::int64s({7}).values);

  // A float_list with a varint value keeps only its floats; a bytes_list ignores a varint.
  auto lists = af::decode_example(example_of(entry("f", len_field(2, varint_field(1, 1) + fixed32_field(1, 4.0f))) +
                                             entry("b", len_field(1, varint_field(1, 1) + len_field(1, "ok")))));
  REQUIRE(lists.has_value());
  CHECK(lists->find("f")->values == feature::floats({4.0f}).values);
  CHECK(lists->find("b")->values == feature::bytes({"ok"}).values);
}

TEST_CASE("scan_example gives views that copy values straight from the wire", "[cpu]") {
  std::string wire = af::encode_example(sample());
  std::vector<af::feature_view> views;
  REQUIRE(af::scan_example(wire, views).has_value());
  CHECK(views.size() == sample().features.size());
  const af::feature_view* image = af::find_feature(views, "image");
  REQUIRE(image);
  CHECK(image->kind == feature_kind::bytes_list);
  CHECK(image->count == 1);
  CHECK(image->byte_count == 3072);
  std::vector<unsigned char> pixels(image->byte_count);
  af::copy_bytes_concatenated(*image, pixels.data());
  CHECK(pixels == std::vector<unsigned char>(3072, 0x7f));
  const af::feature_view* ids = af::find_feature(views, "ids");
  REQUIRE(ids);
  std::vector<int64_t> values(ids->count);
  af::copy_int64s(*ids, values.data());
  CHECK(values == std::get<std::vector<int64_t>>(sample().find("ids")->values));
  std::vector<std::string_view> tags;
  af::bytes_values(*af::find_feature(views, "tags"), tags);
  REQUIRE(tags.size() == 3);
  CHECK(tags[0] == "cat");
  CHECK(tags[1].empty());
  CHECK(af::find_feature(views, "missing") == nullptr);
}

namespace {

std::string decode_error(const std::string& wire) {
  auto ex = af::decode_example(wire);
  REQUIRE_FALSE(ex.has_value());
  CHECK(ex.error_value().code == errc::malformed_input);
  return ex.error_value().message;
}

}  // namespace

TEST_CASE("malformed wire bytes give errors naming the field path and the offset", "[cpu]") {
  // bytes_list claims 900 bytes inside a Feature that holds far fewer.
  std::string feature_msg = tag(1, 2) + varint(900) + std::string(10, 'x');
  std::string wire = example_of(entry("image", feature_msg));
  // Offsets: Example tag+len (2), entry tag+len (2), key field (7), value tag+len (2) = 13.
  CHECK(decode_error(wire) == "features.feature['image'].bytes_list: length 900 runs past the end at offset 13");

  // A nested length larger than its parent: the entry says 50 bytes, the Example holds fewer.
  std::string overflow = len_field(1, tag(1, 2) + varint(50) + len_field(1, "k"));
  CHECK(decode_error(overflow) == "features.feature: length 50 runs past the end at offset 2");

  // A varint cut off at the end of the message.
  std::string cut = example_of(entry("n", len_field(3, std::string("\x08\xff", 2))));
  CHECK(contains(decode_error(cut), "features.feature['n'].int64_list.value: truncated or overlong varint"));

  // Packed floats must be whole floats; invalid wire types, field 0 and broken groups are refused.
  CHECK(contains(decode_error(example_of(entry("f", len_field(2, len_field(1, "abcde"))))),
                 "packed float length 5 is not a multiple of 4"));
  CHECK(contains(decode_error(tag(3, 7)), "invalid wire type 7 at offset 0"));
  CHECK(contains(decode_error(std::string("\x00\x01", 2)), "invalid field number 0"));
  CHECK(contains(decode_error(tag(5, 3)), "field_5: group has no end-group tag at offset 0"));
  CHECK(contains(decode_error(tag(5, 4)), "field_5: end-group tag without a start-group at offset 0"));
  CHECK(contains(decode_error(tag(5, 3) + varint_field(1, 1) + tag(6, 4)),
                 "field_5: group ends with the end-group tag of field 6 at offset 3"));
  CHECK(decode_error(example_of(entry("g", len_field(3, tag(9, 3))))) ==
        "features.feature['g'].int64_list.field_9: group has no end-group tag at offset 11");
  std::string deep, closing;
  for (int i = 0; i < 101; ++i) {
    deep += tag(7, 3);
    closing += tag(7, 4);
  }
  CHECK(contains(decode_error(deep + closing), "groups nested deeper than 100"));
  CHECK(contains(decode_error(std::string("\x0a", 1)), "truncated or overlong length varint at offset 0"));
  CHECK(contains(decode_error(std::string(11, '\xff')), "truncated or overlong tag varint"));
  CHECK(contains(decode_error(tag(9, 5) + "ab"), "field_9: 4-byte value runs past the end"));
}

TEST_CASE("every truncation of a valid Example is either valid or a clean error", "[cpu]") {
  std::string wire = af::encode_example(sample());
  for (std::size_t n = 0; n < wire.size(); ++n) {
    auto ex = af::decode_example(std::string_view(wire.data(), n));
    if (n > 0) REQUIRE_FALSE(ex.has_value());  // the outer length always runs past a cut
  }
}

TEST_CASE("10k random mutations of a valid Example never crash and decoded results re-encode", "[cpu]") {
  // Small features so that mutations hit structure (tags, lengths) rather than payload bytes.
  example ex;
  ex.features["a"] = feature::int64s({1, -2, 300});
  ex.features["b"] = feature::bytes({"xy", ""});
  ex.features["c"] = feature::floats({1.0f, 2.5f});
  ex.features["d"] = feature{};
  const std::string wire = af::encode_example(ex);
  std::mt19937 gen(1234);
  int decoded = 0;
  std::vector<af::feature_view> views;
  for (int i = 0; i < 10000; ++i) {
    std::string m = wire;
    const int edits = 1 + static_cast<int>(gen() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = gen() % m.size();
      switch (gen() % 4) {
        case 0: m[at] = static_cast<char>(m[at] ^ (1u << (gen() % 8))); break;  // flip a bit
        case 1: m[at] = static_cast<char>(gen()); break;                        // replace a byte
        case 2: m.erase(at, 1 + gen() % 3); break;                              // delete bytes
        case 3: m.insert(at, 1, static_cast<char>(gen())); break;               // insert a byte
      }
      if (m.empty()) m = wire;
    }
    auto got = af::decode_example(m);
    (void)af::scan_example(m, views);
    if (!got) {
      REQUIRE(got.error_value().code == errc::malformed_input);
      continue;
    }
    ++decoded;
    // Whatever decoded is a proper Example: its canonical encoding decodes to itself. (NaN floats
    // from mutated bits compare unequal, so compare encodings.)
    const std::string again = af::encode_example(*got);
    auto round = af::decode_example(again);
    REQUIRE(round.has_value());
    REQUIRE(af::encode_example(*round) == again);
  }
  CHECK(decoded > 0);
}
