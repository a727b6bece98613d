// Writes the seed corpora of the fuzz targets, made by our own writers plus a few hand-made edge
// cases: fuzz_make_corpus <dir> fills <dir>/<target>/ (tests/fuzz/corpus is the committed one).
// Each seed is small: the fuzzers mutate from these, they need not be exhaustive.

#include <unistd.h>

#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../support/protobuf_wire.hpp"
#include "ops/runtime/function.hpp"
#include "ops/passes/fusion.hpp"
#include "ops/tensor.hpp"
#include "serialization/checkpoint.hpp"
#include "serialization/example.hpp"
#include "serialization/graph_codec.hpp"
#include "serialization/tensor_codec.hpp"
#include "serialization/npy.hpp"
#include "serialization/tensor_frame.hpp"
#include "serialization/tfevents.hpp"
#include "serialization/tfrecord.hpp"

namespace {

namespace fs = std::filesystem;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_make_corpus: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T value_or_die(af::expected<T> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error_value().to_string());
  return std::move(r).value();
}
void ok_or_die(af::expected<void> r, const char* what) {
  if (!r) die(std::string(what) + ": " + r.error_value().to_string());
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct corpus_dir {
  fs::path dir;
  void put(const std::string& name, std::string_view bytes) const {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) die("cannot write " + (dir / name).string());
  }
};

corpus_dir make_dir(const fs::path& root, const std::string& target) {
  fs::create_directories(root / target);
  for (const auto& e : fs::directory_iterator(root / target)) fs::remove(e.path());  // only our seeds
  return {root / target};
}

std::string with_mode(uint8_t mode, std::string_view body) { return std::string(1, static_cast<char>(mode)) + std::string(body); }

// ---- protobuf bits for hand-made Examples ----------------------------------------------------------

using af::testing::wire::len_field;
using af::testing::wire::tag;
using af::testing::wire::varint;
std::string fixed32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i));
  return out;
}
std::string fixed64(uint64_t v) { return fixed32(static_cast<uint32_t>(v)) + fixed32(static_cast<uint32_t>(v >> 32)); }
// Example{features{feature{key, value}...}} from already encoded entries.
std::string example_of(const std::vector<std::string>& entries) {
  std::string features;
  for (const auto& e : entries) features += len_field(1, e);
  return len_field(1, features);
}
std::string entry(std::string_view key, std::string_view feature_bytes) {
  return len_field(1, key) + len_field(2, feature_bytes);
}

af::example digits_like_example() {
  af::example ex;
  std::vector<float> image(64);
  for (int i = 0; i < 64; ++i) image[static_cast<std::size_t>(i)] = static_cast<float>(i % 17) / 16.0f;
  ex.features["image"] = af::feature::floats(image);
  ex.features["label"] = af::feature::int64s({7});
  return ex;
}

std::vector<std::string> example_seeds() {
  std::vector<std::string> seeds;
  seeds.push_back(af::encode_example(digits_like_example()));
  af::example mixed;
  mixed.features["bytes"] = af::feature::bytes({"", "abc", std::string(40, 'x')});
  mixed.features["empty_floats"] = af::feature::floats({});
  mixed.features["ints"] = af::feature::int64s({0, -1, INT64_MIN, INT64_MAX, 300});
  mixed.features["floats"] = af::feature::floats({-0.0f, 1.5f, std::bit_cast<float>(0x7fc00001u)});
  mixed.features["none"] = af::feature{};
  mixed.features["\xc3\xa9t\xc3\xa9"] = af::feature::bytes({"\xff\xfe"});
  seeds.push_back(af::encode_example(mixed));
  seeds.push_back(std::string());  // an empty Example is valid
  // Unpacked floats and int64s, as older writers produce them.
  seeds.push_back(example_of({entry("unpacked_f", len_field(2, tag(1, 5) + fixed32(0x3f800000) + tag(1, 5) + fixed32(0x40000000))),
                              entry("unpacked_i", len_field(3, tag(1, 0) + varint(5) + tag(1, 0) + varint(~uint64_t{0})))}));
  // One entry whose value field appears twice (merged), a repeated key (the last wins), the
  // oneof switching kind, and unknown fields of every wire type, a group included.
  const std::string unknowns = tag(9, 0) + varint(1) + tag(10, 1) + std::string(8, '\1') + len_field(11, "zz") +
                               tag(12, 3) + tag(1, 0) + varint(2) + tag(12, 4) + tag(13, 5) + fixed32(7);
  seeds.push_back(example_of({len_field(1, "k") + len_field(2, len_field(3, len_field(1, varint(1)))) +
                                  len_field(2, len_field(3, len_field(1, varint(2)))),
                              entry("k", len_field(1, len_field(1, "b"))),
                              entry("switch", len_field(2, len_field(1, fixed32(0))) + len_field(1, len_field(1, "s")) +
                                                  unknowns),
                              unknowns + entry("u", len_field(3, unknowns + len_field(1, varint(3))))}) +
                  unknowns + example_of({entry("second_features", "")}));
  // Truncated, and a known field with an unexpected wire type.
  seeds.push_back(af::encode_example(digits_like_example()).substr(0, 40));
  seeds.push_back(example_of({entry("wire", tag(2, 0) + varint(4) + len_field(1, tag(1, 0) + varint(1)))}));
  // Where libprotobuf differs (see fuzz_example_protobuf.cpp): a key that is not UTF-8, a varint
  // with bits beyond 64, a tag padded to 6 bytes.
  seeds.push_back(example_of({entry("wi\xf2" "e", len_field(3, len_field(1, varint(8))))}));
  seeds.push_back(example_of({entry("big", len_field(3, len_field(1, std::string(9, '\xff') + "\x21")))}));
  seeds.push_back(example_of({entry("k", "\x9a\x80\x80\x80\x80\x00" + varint(0))}));
  return seeds;
}

// ---- targets --------------------------------------------------------------------------------------

void tfrecord_seeds(const fs::path& root, const fs::path& scratch) {
  const corpus_dir out = make_dir(root, "tfrecord");
  const auto examples = example_seeds();
  std::string plain;
  for (const auto& e : examples) af::append_tfrecord(plain, e);
  af::append_tfrecord(plain, "");
  out.put("plain", with_mode(0x00, plain));
  out.put("plain_next_into", with_mode(0x40, plain));
  out.put("plain_next_owning", with_mode(0x80, plain));
  out.put("plain_reopen", with_mode(0xc0, plain));
  std::string large;
  af::append_tfrecord(large, std::string(5000, 'L'));
  af::append_tfrecord(large, "after");
  out.put("large_record_small_buffer", with_mode(0x10, large));
  out.put("compress_here_zlib", with_mode(0x03, plain));
  out.put("compress_here_gzip_two_streams_reopen", with_mode(0x03 | 0x04 | 0x20 | 0xc0, plain));
  out.put("compress_here_gzip_large", with_mode(0x03 | 0x04 | 0x10, large));
  for (auto [name, c, mode] : {std::tuple{"gzip_file", af::record_compression::gzip, 0x01},
                               std::tuple{"zlib_file", af::record_compression::zlib, 0x02}}) {
    const fs::path path = scratch / name;
    auto writer = value_or_die(af::tfrecord_writer::open(path.string(), c), "tfrecord_writer::open");
    for (const auto& e : examples) ok_or_die(writer.write(e), "tfrecord_writer::write");
    ok_or_die(writer.flush(), "tfrecord_writer::flush");  // a sync flush point inside the stream
    ok_or_die(writer.write("tail"), "tfrecord_writer::write");
    ok_or_die(writer.close(), "tfrecord_writer::close");
    out.put(name, with_mode(static_cast<uint8_t>(mode), read_file(path)));
  }
  // Edge cases: cut inside a record, a wrong data CRC (read with and without verification), a
  // corrupt length, an empty file.
  out.put("truncated", with_mode(0x00, plain.substr(0, plain.size() - 7)));
  std::string bad_crc = plain;
  bad_crc[af::tfrecord_header_bytes + 2] ^= 0x55;
  out.put("wrong_data_crc", with_mode(0x00, bad_crc));
  out.put("wrong_data_crc_unverified", with_mode(0x08, bad_crc));
  std::string bad_length = plain;
  bad_length[3] = 0x7f;
  out.put("corrupt_length", with_mode(0x00, bad_length));
  out.put("empty", with_mode(0x00, ""));
}

void example_seeds_dir(const fs::path& root) {
  const corpus_dir out = make_dir(root, "example");
  int i = 0;
  for (const auto& e : example_seeds()) out.put("example_" + std::to_string(i++), e);
}

void checkpoint_seeds(const fs::path& root, const fs::path& scratch) {
  const corpus_dir out = make_dir(root, "checkpoint");
  auto pack = [](uint8_t mode, const fs::path& dir) {
    const std::string index = read_file(dir / "index"), metadata = read_file(dir / "metadata");
    std::string bytes(1, static_cast<char>(mode));
    for (std::size_t size : {index.size(), metadata.size()})
      for (int b = 0; b < 2; ++b) bytes += static_cast<char>(size >> (8 * b));
    return bytes + index + metadata + read_file(dir / "data");
  };
  af::ckpt::checkpoint ck;
  ck.tensors.push_back({"dense/kernel", af::tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})});
  ck.tensors.push_back({"step", af::tensor::scalar<int64_t>(1200)});
  ck.tensors.push_back({"empty", value_or_die(af::tensor::empty({0, 4}, af::dtype::u8), "tensor::empty")});
  ck.tensors.push_back({"f64", af::tensor::from_vector(std::vector<double>{-0.0, 1e300}, {2})});
  ck.metadata = {{"step", "1200"}, {"iterator", std::string("\0\1\2", 3)}};
  const fs::path full = scratch / "ckpt_full";
  ok_or_die(af::ckpt::save(full.string(), ck), "ckpt::save");
  out.put("full", pack(0x07, full));
  out.put("full_as_written", pack(0x00, full));
  out.put("full_without_data", pack(0x07 | 0x08, full));
  const fs::path empty = scratch / "ckpt_empty";
  ok_or_die(af::ckpt::save(empty.string(), af::ckpt::checkpoint{}), "ckpt::save");
  out.put("empty", pack(0x07, empty));
}

void tensor_frame_seeds(const fs::path& root) {
  const corpus_dir out = make_dir(root, "tensor_frame");
  auto frame = [](const af::tensor& t) {
    return af::encode_tensor_frame_head(t) + std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
  };
  const auto end = [](uint64_t n) {
    auto e = af::encode_end_frame(n);
    return std::string(reinterpret_cast<const char*>(e.data()), e.size());
  };
  const af::tensor matrix = af::tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const af::tensor scalar = af::tensor::scalar<int64_t>(-5);
  const af::tensor empty = value_or_die(af::tensor::empty({3, 0}, af::dtype::u8), "tensor::empty");
  out.put("stream", frame(matrix) + frame(scalar) + frame(empty) + end(3));
  out.put("end_only", end(0));
  std::string bad_magic = frame(matrix);
  bad_magic[0] = 'X';
  out.put("bad_magic", bad_magic);
  // Headers no tensor could produce: an unknown dtype, a payload size that disagrees, a CUDA origin.
  auto with_header = [](const af::tensor_header& h) {
    std::string header = af::encode_tensor_header(h);
    std::string prefix(af::frame_prefix_bytes, '\0');
    const uint32_t magic = af::frame_magic, kind = 1;
    const uint64_t size = header.size();
    for (int i = 0; i < 4; ++i) prefix[static_cast<std::size_t>(i)] = static_cast<char>(magic >> (8 * i));
    for (int i = 0; i < 4; ++i) prefix[static_cast<std::size_t>(4 + i)] = static_cast<char>(kind >> (8 * i));
    for (int i = 0; i < 8; ++i) prefix[static_cast<std::size_t>(8 + i)] = static_cast<char>(size >> (8 * i));
    return prefix + header;
  };
  out.put("unknown_dtype", with_header({static_cast<af::dtype>(200), {2}, 8, af::device::cpu()}));
  out.put("wrong_payload_size", with_header({af::dtype::f32, {2, 2}, 15, af::device::cpu()}));
  out.put("cuda_origin", with_header({af::dtype::f32, {1}, 4, af::device::cuda(1)}) + std::string(4, '\0') + end(1));
}

void tfevents_seeds(const fs::path& root) {
  const corpus_dir out = make_dir(root, "tfevents");
  const std::vector<std::string> events = {af::tfevents::encode_file_version_event(1700000000.5),
                                           af::tfevents::encode_scalar_event(1700000001.0, 3, "loss", 0.25f),
                                           af::tfevents::encode_scalar_event(0.0, -2, "acc/top-1", -0.0f),
                                           af::tfevents::encode_scalar_event(-1.0, 0, "", 1e30f)};
  std::string file, separated;
  for (const auto& e : events) {
    af::append_tfrecord(file, e);
    if (!separated.empty()) separated += "\xfe\xfe\xfe\xfe";
    separated += e;
  }
  out.put("file", with_mode(0, file));
  out.put("events", with_mode(1, separated));
  // A Summary with two values, one of them not a simple_value (an image: field 4), and a step
  // written after the summary.
  const std::string image_value = len_field(1, "img") + len_field(4, len_field(1, varint(8)));
  const std::string simple_value = len_field(1, "x") + tag(2, 5) + fixed32(0x3f800000);
  out.put("mixed_values", with_mode(1, len_field(5, len_field(1, image_value) + len_field(1, simple_value)) +
                                           tag(2, 0) + varint(9)));
  // Mode 2: wall_time bits, step, value bits (a NaN with a payload), tag.
  out.put("roundtrip", with_mode(2, fixed64(std::bit_cast<uint64_t>(1700000002.25)) + fixed64(77) +
                                        fixed32(0x7f800001) + "nan/tag"));
}

void digits_seeds(const fs::path& root) {
  const corpus_dir out = make_dir(root, "digits_csv");
  std::string line;
  for (int i = 0; i < 64; ++i) line += std::to_string(i % 17) + ",";
  const std::string csv = line + "3\n" + line + "9\n";
  out.put("plain", with_mode(0, csv));
  out.put("gzip_here", with_mode(1, csv));
  out.put("gzip_here_cut_short", with_mode(3, csv));
  std::string spaced;
  for (int i = 0; i < 64; ++i) spaced += " " + std::to_string(i % 5) + ".0 ,";
  out.put("spaces_crlf_decimal", with_mode(0, spaced + "5.0\r\n" + line + "0"));
  out.put("wrong_columns", with_mode(0, line + "\n"));
  out.put("label_out_of_range", with_mode(0, line + "12\n"));
}

void graph_seeds(const fs::path& root) {
  const corpus_dir out = make_dir(root, "graph");
  // A small model: a matmul, a bias, a fused activation, a reduction, named inputs and outputs.
  af::function_options options;
  options.input_names = {"x", "w"};
  options.output_names = {"probabilities", "total"};
  options.input_signature = std::vector<af::graph::value_type>{{af::dtype::f32, {-1, 3}}, {af::dtype::f32, {3, 2}}};
  af::function fn{[](const std::vector<af::sym>& in) {
                    auto h = af::gelu(af::matmul(in[0], in[1]) + 0.5, true);
                    return std::vector<af::sym>{af::softmax(h), af::reduce_sum(h)};
                  },
                  options};
  auto traced = value_or_die(fn.concrete({{af::dtype::f32, {2, 3}}, {af::dtype::f32, {3, 2}}}), "trace");
  af::graph::module m;
  m.functions.push_back({"predict", traced->optimized});
  m.functions.push_back({"traced", traced->traced});
  m.signatures.push_back(af::graph::signature_of("serving_default", "predict", traced->optimized));
  out.put("module", af::encode_module(m));
  out.put("graph", af::encode_graph(traced->optimized));
  // Each kind of attribute, a constant, an integer input and an op on a device.
  af::graph::graph_builder b;
  const auto indices = b.parameter({af::dtype::i64, {4}}, "ids");
  b.place_on("cpu:1");
  const auto hot = b.add("one_hot", {indices}, {{"depth", int64_t{5}}, {"on_value", 2.5}}).value();
  const auto c = b.constant(af::tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, {5}));
  const auto y = b.add("mul", {hot, c}).value();
  const auto z = b.add("transpose", {y}, {{"perm", std::vector<int64_t>{1, 0}}}).value();
  out.put("attributes", af::encode_graph(std::move(b).finish({z}, {"scaled"})));
}

void npy_seeds(const fs::path& root) {
  const corpus_dir out = make_dir(root, "npy");
  out.put("f32_matrix", value_or_die(af::npy::encode(af::tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})), "npy::encode"));
  out.put("i64_vector", value_or_die(af::npy::encode(af::tensor::from_vector(std::vector<int64_t>{-1, 0, 7})), "npy::encode"));
  out.put("bool_vector", value_or_die(af::npy::encode(af::tensor::from_vector(std::vector<bool>{true, false, true})), "npy::encode"));
  // A version 2 header as NumPy writes one for long headers.
  std::string v2 = "\x93NUMPY\x02";
  v2 += '\0';
  std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }";
  dict.append(64 - (12 + dict.size() + 1) % 64, ' ');
  dict += '\n';
  for (int i = 0; i < 4; ++i) v2 += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
  out.put("f64_version2", v2 + dict + std::string(8, '\0'));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) die("usage: fuzz_make_corpus <corpus dir>");
  const fs::path root = argv[1];
  const fs::path scratch = fs::temp_directory_path() / ("af_fuzz_make_corpus_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  tfrecord_seeds(root, scratch);
  example_seeds_dir(root);
  checkpoint_seeds(root, scratch);
  tensor_frame_seeds(root);
  tfevents_seeds(root);
  digits_seeds(root);
  graph_seeds(root);
  npy_seeds(root);
  fs::remove_all(scratch);
  return 0;
}
