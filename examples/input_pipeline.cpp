// An input pipeline over TFRecord files: interleaved reads, parallel parsing and decoding, shuffle,
// batch and prefetch, each stage an actor. Prints the batches, a bottleneck report and resumes
// from a saved position.
//
//   build/examples/input_pipeline [DIR]   (writes a few small files into DIR, default /tmp)

#include <cstdio>
#include <filesystem>
#include <string>

#include "actors/runtime.hpp"
#include "pipeline/dataset.hpp"
#include "pipeline/iterator.hpp"
#include "pipeline/profiler.hpp"
#include "pipeline/records.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

namespace {

// Four files of 100 Examples: an 8x8 "image" of bytes and an int64 label.
std::string write_sample_files(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (int f = 0; f < 4; ++f) {
    auto writer = af::tfrecord_writer::open((dir / ("part-" + std::to_string(f) + ".tfrecord")).string());
    if (!writer) throw std::runtime_error(writer.error_value().message);
    for (int i = 0; i < 100; ++i) {
      af::example ex;
      ex.features["image"] = af::feature::bytes({std::string(64, static_cast<char>(i))});
      ex.features["label"] = af::feature::int64s({f * 100 + i});
      if (auto ok = writer->write(af::encode_example(ex)); !ok) throw std::runtime_error(ok.error_value().message);
    }
    if (auto ok = writer->close(); !ok) throw std::runtime_error(ok.error_value().message);
  }
  return (dir / "part-*.tfrecord").string();
}

}  // namespace

int main(int argc, char** argv) {
  using af::data::dataset;
  const std::filesystem::path dir = std::filesystem::path(argc > 1 ? argv[1] : "/tmp") / "actorflow_example_records";
  const std::string pattern = write_sample_files(dir);

  af::runtime rt;
  const af::feature_spec spec{{"image", af::fixed_len(af::dtype::u8, {8, 8})},
                              {"label", af::fixed_len(af::dtype::i64, {})}};
  auto to_float = [](af::element e) -> af::expected<af::element> {
    auto image = af::tensor::empty({8, 8}, af::dtype::f32);
    if (!image) return image.error_value();
    const auto* src = e.find("image")->data<uint8_t>();
    for (int i = 0; i < 64; ++i) image->data<float>()[i] = static_cast<float>(src[i]) / 255.0f;
    e.set("image", std::move(*image));
    return e;
  };
  auto ds = dataset::list_files(pattern)
                .interleave([](const af::element& f) -> af::expected<dataset> { return dataset::from_tfrecord(f); },
                            /*cycle_length=*/2, /*block_length=*/4)
                .map(af::data::parse_example_fn(spec), af::data::autotune, true, "parse")
                .map(to_float, af::data::autotune, true, "to_float")
                .shuffle(128, /*seed=*/42)
                .batch(32)
                .prefetch(af::data::autotune);
  std::printf("%s\n", ds.to_dot().c_str());

  auto it = ds.iterate(rt);
  af::data::profiler prof{it};
  af::data::iterator_state saved;
  int batches = 0;
  for (auto& batch : it) {
    const auto* label = batch.find("label");
    std::printf("batch %d: image %s, first label %lld\n", batches, af::to_string(batch.find("image")->shape()).c_str(),
                static_cast<long long>(label->data<int64_t>()[0]));
    if (++batches == 5) saved = it.save();  // a checkpoint mid-epoch
  }
  if (it.status()) {
    std::fprintf(stderr, "pipeline failed: %s\n", it.status().message.c_str());
    return 1;
  }
  std::printf("\n%s", prof.report().to_string().c_str());

  if (saved.stages)
    std::printf("resume restores the stages' saved state\n");
  else
    std::printf("resume replays the input: %s\n", saved.replay_reason.c_str());
  auto resumed = ds.resume(rt, saved);
  int remaining = 0;
  for (auto& batch : *resumed) remaining += batch.find("label") ? 1 : 0;
  std::printf("resumed after batch 5: %d more batches (of %d in all)\n", remaining, batches);
  std::filesystem::remove_all(dir);
  return 0;
}
