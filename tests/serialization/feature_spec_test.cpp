#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "serialization/example.hpp"
#include "serialization/feature_spec.hpp"

using af::dtype;
using af::errc;
using af::example;
using af::feature;
using af::tensor;

namespace {

std::string image_example(int label, unsigned char fill) {
  example ex;
  ex.features["image"] = feature::bytes({std::string(32 * 32 * 3, static_cast<char>(fill))});
  ex.features["label"] = feature::int64s({label});
  ex.features["weights"] = feature::floats({0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f});
  ex.features["tokens"] = feature::int64s(std::vector<int64_t>(static_cast<std::size_t>(label), label));
  ex.features["caption"] = feature::bytes({std::string(static_cast<std::size_t>(label), 'c')});
  return af::encode_example(ex);
}

std::string parse_error(const std::string& wire, const af::feature_spec& spec) {
  auto e = af::parse_example(wire, spec);
  REQUIRE_FALSE(e.has_value());
  return e.error_value().message;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("fixed_len features become tensors of the spec's shape and dtype", "[cpu]") {
  af::feature_spec spec{{"image", af::fixed_len(dtype::u8, {32, 32, 3})},
                        {"label", af::fixed_len(dtype::i64, {})},
                        {"weights", af::fixed_len(dtype::f32, {2, 3})},
                        {"caption", af::fixed_len(dtype::u8, {})}};
  auto el = af::parse_example(image_example(5, 9), spec);
  INFO((el ? std::string() : el.error_value().message));
  REQUIRE(el.has_value());
  REQUIRE(el->size() == 4);
  CHECK(el->fields[0].name == "image");
  const tensor& image = *el->find("image");
  CHECK(image.type() == dtype::u8);
  CHECK(image.shape() == af::shape{32, 32, 3});
  CHECK(image.to_vector<uint8_t>() == std::vector<uint8_t>(3072, 9));
  const tensor& label = *el->find("label");
  CHECK(label.type() == dtype::i64);
  CHECK(label.shape().empty());
  CHECK(label.item<int64_t>() == 5);
  CHECK(el->find("weights")->shape() == af::shape{2, 3});
  CHECK(el->find("weights")->to_vector<float>() == std::vector<float>{0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f});
  // A bytes feature with shape [] is one value of any length: a 1-D tensor of its bytes.
  CHECK(el->find("caption")->shape() == af::shape{5});
  CHECK(el->find("caption")->to_vector<uint8_t>() == std::vector<uint8_t>(5, 'c'));
}

TEST_CASE("a missing feature takes its default or is an error naming it", "[cpu]") {
  const std::string wire = image_example(1, 0);
  af::feature_spec with_default{{"mask", af::fixed_len(dtype::f32, {2}, tensor::from_vector<float>({7.f, 8.f}))},
                                {"id", af::fixed_len(dtype::i64, {}, tensor::scalar<int64_t>(-1))},
                                {"raw", af::fixed_len(dtype::u8, {}, tensor::from_vector<uint8_t>({1, 2, 3}))}};
  auto el = af::parse_example(wire, with_default);
  REQUIRE(el.has_value());
  CHECK(el->find("mask")->to_vector<float>() == std::vector<float>{7.f, 8.f});
  CHECK(el->find("id")->item<int64_t>() == -1);
  CHECK(el->find("raw")->to_vector<uint8_t>() == std::vector<uint8_t>{1, 2, 3});

  CHECK(parse_error(wire, {{"mask", af::fixed_len(dtype::f32, {2})}}) == "missing feature 'mask'");

  // A Feature with no list set counts as missing for fixed_len.
  example ex;
  ex.features["unset"] = feature{};
  auto unset = af::parse_example(af::encode_example(ex), {{"unset", af::fixed_len(dtype::i64, {}, tensor::scalar<int64_t>(4))}});
  REQUIRE(unset.has_value());
  CHECK(unset->find("unset")->item<int64_t>() == 4);
}

TEST_CASE("a wrong value count or list kind is an error naming the feature, wanted and found", "[cpu]") {
  const std::string wire = image_example(3, 0);
  CHECK(parse_error(wire, {{"weights", af::fixed_len(dtype::f32, {4})}}) ==
        "feature 'weights' has 6 values, spec wants 4 (fixed_len f32 shape [4])");
  CHECK(parse_error(wire, {{"image", af::fixed_len(dtype::u8, {32, 32, 4})}}) ==
        "feature 'image' has 3072 bytes, spec wants 4096 (fixed_len u8 shape [32,32,4])");
  CHECK(parse_error(wire, {{"label", af::fixed_len(dtype::f32, {})}}) ==
        "feature 'label' is int64_list, spec wants float_list");
  CHECK(parse_error(wire, {{"image", af::fixed_len(dtype::i64, {})}}) ==
        "feature 'image' is bytes_list, spec wants int64_list");

  example two;
  two.features["b"] = feature::bytes({"x", "y"});
  CHECK(parse_error(af::encode_example(two), {{"b", af::fixed_len(dtype::u8, {})}}) ==
        "feature 'b' has 2 bytes values, fixed_len u8 with shape [] wants exactly 1");
  // With a shape, the bytes of several values count together.
  auto joined = af::parse_example(af::encode_example(two), {{"b", af::fixed_len(dtype::u8, {2})}});
  REQUIRE(joined.has_value());
  CHECK(joined->find("b")->to_vector<uint8_t>() == std::vector<uint8_t>{'x', 'y'});

  // Malformed wire bytes keep the decoder's path and offset.
  CHECK(contains(parse_error(std::string("\x0a\x05", 2), {{"x", af::fixed_len(dtype::i64, {})}}),
                 "features: length 5 runs past the end at offset 0"));
}

TEST_CASE("a bad spec is refused before parsing", "[cpu]") {
  auto check = [](const af::feature_spec& spec, errc code, const std::string& text) {
    auto v = af::validate(spec);
    REQUIRE_FALSE(v.has_value());
    CHECK(v.error_value().code == code);
    CHECK(contains(v.error_value().message, text));
    CHECK_FALSE(af::example_parser::make(spec).has_value());
  };
  check({{"x", af::fixed_len(dtype::f64, {})}}, errc::dtype_mismatch, "not f64");
  check({{"x", af::fixed_len(dtype::f32, {-1})}}, errc::invalid_argument, "negative dimension");
  check({{"x", af::fixed_len(dtype::f32, {3}, tensor::from_vector<float>({1.f, 2.f}))}}, errc::shape_mismatch,
        "default has shape [2], spec shape is [3]");
  check({{"x", af::fixed_len(dtype::f32, {1}, tensor::scalar<int64_t>(1))}}, errc::dtype_mismatch, "f32 tensor");
  check({{"x", af::fixed_len(dtype::f32, {})}, {"x", af::var_len(dtype::f32)}}, errc::invalid_argument, "named twice");
  check({{"", af::var_len(dtype::f32)}}, errc::invalid_argument, "no name");
  check({{"x", af::var_len(dtype::f32, af::var_len_layout::padded, -5)}}, errc::invalid_argument, "pad_to");
}

TEST_CASE("var_len padded gives the values, padded to pad_to when asked", "[cpu]") {
  const std::string wire = image_example(3, 0);
  auto plain = af::parse_example(wire, {{"tokens", af::var_len(dtype::i64)}, {"absent", af::var_len(dtype::f32)}});
  REQUIRE(plain.has_value());
  CHECK(plain->find("tokens")->to_vector<int64_t>() == std::vector<int64_t>{3, 3, 3});
  CHECK(plain->find("absent")->shape() == af::shape{0});

  auto padded = af::parse_example(wire, {{"tokens", af::var_len(dtype::i64, af::var_len_layout::padded, 5, -1)},
                                         {"caption", af::var_len(dtype::u8, af::var_len_layout::padded, 4)}});
  REQUIRE(padded.has_value());
  CHECK(padded->find("tokens")->to_vector<int64_t>() == std::vector<int64_t>{3, 3, 3, -1, -1});
  CHECK(padded->find("caption")->to_vector<uint8_t>() == std::vector<uint8_t>{'c', 'c', 'c', 0});
  CHECK(parse_error(wire, {{"tokens", af::var_len(dtype::i64, af::var_len_layout::padded, 2)}}) ==
        "feature 'tokens' has 3 values, more than pad_to 2");
}

TEST_CASE("var_len ragged gives values plus <name>/row_lengths", "[cpu]") {
  auto el = af::parse_example(image_example(4, 0), {{"tokens", af::var_len(dtype::i64, af::var_len_layout::ragged)},
                                                    {"label", af::fixed_len(dtype::i64, {})}});
  REQUIRE(el.has_value());
  REQUIRE(el->size() == 3);
  CHECK(el->fields[0].name == "tokens");
  CHECK(el->fields[1].name == "tokens/row_lengths");
  CHECK(el->fields[2].name == "label");
  CHECK(el->find("tokens")->to_vector<int64_t>() == std::vector<int64_t>{4, 4, 4, 4});
  CHECK(el->find("tokens/row_lengths")->shape() == af::shape{1});
  CHECK(el->find("tokens/row_lengths")->to_vector<int64_t>() == std::vector<int64_t>{4});
}

TEST_CASE("a batch of Examples stacks fixed features and lines up var_len ones", "[cpu]") {
  std::vector<std::string> wires = {image_example(1, 10), image_example(3, 20), image_example(2, 30)};
  std::vector<std::string_view> views(wires.begin(), wires.end());
  af::feature_spec spec{{"image", af::fixed_len(dtype::u8, {32, 32, 3})},
                        {"label", af::fixed_len(dtype::i64, {})},
                        {"padded", af::var_len(dtype::i64)},
                        {"ragged", af::var_len(dtype::i64, af::var_len_layout::ragged)}};
  // "padded" and "ragged" read the same "tokens" feature under other names: rename in the wire.
  spec[2].name = "tokens";
  spec[3].name = "caption";
  spec[3].def.type = dtype::u8;
  auto parser = af::example_parser::make(spec);
  REQUIRE(parser.has_value());
  auto batch = parser->parse_batch(views);
  INFO((batch ? std::string() : batch.error_value().message));
  REQUIRE(batch.has_value());
  const tensor& image = *batch->find("image");
  CHECK(image.shape() == af::shape{3, 32, 32, 3});
  auto pixels = image.to_vector<uint8_t>();
  CHECK(pixels[0] == 10);
  CHECK(pixels[3072] == 20);
  CHECK(pixels[2 * 3072 + 5] == 30);
  CHECK(batch->find("label")->shape() == af::shape{3});
  CHECK(batch->find("label")->to_vector<int64_t>() == std::vector<int64_t>{1, 3, 2});
  const tensor& tokens = *batch->find("tokens");
  CHECK(tokens.shape() == af::shape{3, 3});  // padded to the longest row
  CHECK(tokens.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 3, 3, 3, 2, 2, 0});
  CHECK(batch->find("caption")->to_vector<uint8_t>() == std::vector<uint8_t>(6, 'c'));
  CHECK(batch->find("caption/row_lengths")->to_vector<int64_t>() == std::vector<int64_t>{1, 3, 2});

  // Errors name the example within the batch.
  wires[1] = "\x0a\x7f";
  views.assign(wires.begin(), wires.end());
  auto bad = parser->parse_batch(views);
  REQUIRE_FALSE(bad.has_value());
  CHECK(contains(bad.error_value().message, "example 1: features: length 127 runs past the end"));
  auto unequal = af::parse_examples(std::vector<std::string_view>{views[0], views[2]}, {{"caption", af::fixed_len(dtype::u8, {})}});
  REQUIRE_FALSE(unequal.has_value());
  CHECK(contains(unequal.error_value().message, "example 1: feature 'caption' has 2 bytes but example 0 has 1"));

  auto none = parser->parse_batch({});
  REQUIRE(none.has_value());
  CHECK(none->find("image")->shape() == af::shape{0, 32, 32, 3});
}
