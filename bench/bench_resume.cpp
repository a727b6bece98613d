// Resuming an input pipeline from its saved iterator state against reaching the same position,
// and against resuming by replay (what a pipeline whose stages cannot save does), measured in the
// same run. The pipeline is the README's: 50k TFRecord Examples (32x32x3 image + label), parsed
// by a parallel map, shuffled in a 2000-element buffer, batched by 32. The iterator is saved at
// 90% of the epoch; a resume is timed from resume() to its first batch, after the state went
// through its checkpoint form (serialize + deserialize).
//
//   build/bench/bench_resume [--quick]

#include <unistd.h>

#include <filesystem>

#include "actors/runtime.hpp"
#include "bench_common.hpp"
#include "pipeline/iterator.hpp"
#include "pipeline/records.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "bench_resume: %s\n", why.c_str());
  std::exit(1);
}

void write_records(const std::string& path, int64_t records) {
  auto w = af::tfrecord_writer::open(path);
  if (!w) fail(w.error_value().message);
  af::example ex;
  for (int64_t i = 0; i < records; ++i) {
    ex.features["image"] = af::feature::bytes({std::string(32 * 32 * 3, static_cast<char>(i))});
    ex.features["label"] = af::feature::int64s({i});
    if (auto ok = w->write(af::encode_example(ex)); !ok) fail(ok.error_value().message);
  }
  if (auto ok = w->close(); !ok) fail(ok.error_value().message);
}

af::element next_of(af::data::iterator& it) {
  auto next = it.next();
  if (!next) fail(next.error_value().message);
  if (!next->has_value()) fail("the pipeline ended early");
  return std::move(**next);
}

int64_t first_label(const af::element& batch) { return batch.find("label")->to_vector<int64_t>().front(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace af::data;
  const bool quick = af::bench::has_flag(argc, argv, "--quick");
  const int64_t records = 50000;
  const int reps = quick ? 3 : 5;
  const auto path =
      (std::filesystem::temp_directory_path() / ("af_bench_resume_" + std::to_string(::getpid()) + ".tfrecord")).string();
  write_records(path, records);
  af::runtime rt;
  const auto ds = dataset::from_tfrecord({path})
                      .map(parse_example_fn({{"image", af::fixed_len(af::dtype::u8, {32, 32, 3})},
                                             {"label", af::fixed_len(af::dtype::i64, {})}}),
                           2)
                      .shuffle(2000)
                      .batch(32);
  const int64_t batches = (records + 31) / 32;
  const int64_t at = batches * 9 / 10;

  std::vector<double> reach_s, save_s, restore_s, parse_s, replay_s, state_bytes;
  for (int r = 0; r < reps; ++r) {
    iterator_state saved;
    int64_t expected_label = 0;
    {
      auto it = ds.iterate(rt);
      reach_s.push_back(af::bench::seconds_of([&] {
        for (int64_t i = 0; i < at; ++i) next_of(it);
      }));
      save_s.push_back(af::bench::seconds_of([&] { saved = it.save(); }));
      if (!saved.stages) fail("no stage state: " + saved.replay_reason);
      expected_label = first_label(next_of(it));
    }
    const std::string text = saved.serialize();
    state_bytes.push_back(static_cast<double>(text.size()));
    parse_s.push_back(af::bench::seconds_of([&] {
      if (!iterator_state::deserialize(text)) fail("the state does not parse");
    }));
    restore_s.push_back(af::bench::seconds_of([&] {
      auto state = iterator_state::deserialize(text);
      if (!state) fail(state.error_value().message);
      auto resumed = ds.resume(rt, *state);
      if (!resumed) fail(resumed.error_value().message);
      if (first_label(next_of(*resumed)) != expected_label) fail("the restored iterator continued elsewhere");
    }));
    iterator_state replay = saved;
    replay.stages.reset();
    replay.pending.clear();
    replay_s.push_back(af::bench::seconds_of([&] {
      auto resumed = ds.resume(rt, replay);
      if (!resumed) fail(resumed.error_value().message);
      if (first_label(next_of(*resumed)) != expected_label) fail("the replayed iterator continued elsewhere");
    }));
  }
  std::filesystem::remove(path);

  const double reach = af::bench::median(reach_s), restore = af::bench::median(restore_s);
  const double replay = af::bench::median(replay_s), save = af::bench::median(save_s);
  std::printf("%lld records, saved at batch %lld of %lld: reaching it %.3f s, save %.2f ms, state %.0f KiB; "
              "resume from state %.2f ms (%.4fx reaching; parsing the state %.2f ms), by replay %.3f s (%.3fx)\n",
              static_cast<long long>(records), static_cast<long long>(at), static_cast<long long>(batches), reach,
              save * 1e3, af::bench::median(state_bytes) / 1024, restore * 1e3, restore / reach,
              af::bench::median(parse_s) * 1e3, replay, replay / reach);
  af::bench::json_line out;
  out.add("records", static_cast<double>(records));
  out.add("reach_s", reach);
  out.add("save_ms", save * 1e3);
  out.add("state_kib", af::bench::median(state_bytes) / 1024);
  out.add("resume_state_ms", restore * 1e3);
  out.add("parse_state_ms", af::bench::median(parse_s) * 1e3);
  out.add("resume_replay_s", replay);
  out.add("resume_state_vs_reach", restore / reach);
  out.add("resume_replay_vs_reach", replay / reach);
  out.add("goal_met", restore / reach <= 0.05);
  out.print();
  return 0;
}
