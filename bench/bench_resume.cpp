// Resuming an input pipeline from its saved iterator state against reaching the same position,
// and against resuming by replay (what a pipeline whose stages cannot save does), measured in the
// same run. Two layouts of 50k TFRecord Examples (32x32x3 image + label), shuffled in a
// 2000-element buffer and batched by 32: one file parsed by a parallel map, and 8 files read and
// parsed by the children of an interleave (cycle 4). The iterator is saved at 90% of the epoch; a
// resume is timed from the state's checkpoint form (deserialize, resume) until the restored stages
// produced a batch (after the batches that were on their way to the reader at the save).
//
//   build/bench/bench_resume [--quick]

#include <unistd.h>

#include <filesystem>
#include <optional>

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

struct figures {
  double reach = 0, save = 0, restore = 0, parse = 0, replay = 0, state_bytes = 0;
};

// Saves `ds` at `at` batches, `reps` times; times reaching that point, saving, resuming from the
// state (through its checkpoint form) and resuming by replay, each to the next batch.
figures measure(af::runtime& rt, const af::data::dataset& ds, int64_t at, int reps) {
  using namespace af::data;
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
    // Timed until the restored stages produced a batch (the saved pending batches come first);
    // shutting the topology down afterwards is not part of resuming.
    std::optional<iterator> resumed;
    restore_s.push_back(af::bench::seconds_of([&] {
      auto state = iterator_state::deserialize(text);
      if (!state) fail(state.error_value().message);
      auto it = ds.resume(rt, *state);
      if (!it) fail(it.error_value().message);
      resumed.emplace(std::move(*it));
      if (first_label(next_of(*resumed)) != expected_label) fail("the restored iterator continued elsewhere");
      for (std::size_t i = 0; i < state->pending.size(); ++i) next_of(*resumed);
    }));
    resumed.reset();
    iterator_state replay = saved;
    replay.stages.reset();
    replay.pending.clear();
    replay_s.push_back(af::bench::seconds_of([&] {
      auto it = ds.resume(rt, replay);
      if (!it) fail(it.error_value().message);
      resumed.emplace(std::move(*it));
      if (first_label(next_of(*resumed)) != expected_label) fail("the replayed iterator continued elsewhere");
    }));
    resumed.reset();
  }
  using af::bench::median;
  return {median(reach_s), median(save_s), median(restore_s), median(parse_s), median(replay_s), median(state_bytes)};
}

void report(const char* layout, const figures& f, int64_t at, int64_t batches) {
  std::printf("%s, saved at batch %lld of %lld: reaching it %.3f s, save %.2f ms, state %.0f KiB; resume from state "
              "%.2f ms (%.4fx reaching; parsing the state %.2f ms), by replay %.3f s (%.3fx)\n",
              layout, static_cast<long long>(at), static_cast<long long>(batches), f.reach, f.save * 1e3,
              f.state_bytes / 1024, f.restore * 1e3, f.restore / f.reach, f.parse * 1e3, f.replay, f.replay / f.reach);
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv, "build/bench/bench_resume [--quick]", {"--quick"});
  using namespace af::data;
  const bool quick = af::bench::has_flag(argc, argv, "--quick");
  const int64_t records = 50000;
  const int files = 8;
  const int reps = quick ? 3 : 5;
  const auto dir = std::filesystem::temp_directory_path() / ("af_bench_resume_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto one_file = (dir / "all.tfrecord").string();
  write_records(one_file, records);
  for (int f = 0; f < files; ++f) write_records((dir / ("part-" + std::to_string(f) + ".tfrecord")).string(), records / files);
  af::runtime rt;
  const auto parse = parse_example_fn({{"image", af::fixed_len(af::dtype::u8, {32, 32, 3})},
                                       {"label", af::fixed_len(af::dtype::i64, {})}});
  const auto single = dataset::from_tfrecord({one_file}).map(parse, 2).shuffle(2000).batch(32);
  // bench_pipeline's layout: files read and parsed inside the interleave's children.
  const auto interleaved = dataset::list_files((dir / "part-*.tfrecord").string())
                               .interleave([parse](const af::element& f) -> af::expected<dataset> {
                                 return dataset::from_tfrecord(f).map(parse);
                               }, 4)
                               .shuffle(2000)
                               .batch(32);
  const int64_t batches = (records + 31) / 32;
  const int64_t at = batches * 9 / 10;
  const figures one = measure(rt, single, at, reps);
  const figures many = measure(rt, interleaved, at, reps);
  std::filesystem::remove_all(dir);

  report("one file, parallel parse", one, at, batches);
  report("interleave of 8 files, parse in the children", many, at, batches);
  af::bench::json_line out;
  out.add("records", static_cast<double>(records));
  out.add("reach_s", one.reach);
  out.add("save_ms", one.save * 1e3);
  out.add("state_kib", one.state_bytes / 1024);
  out.add("resume_state_ms", one.restore * 1e3);
  out.add("parse_state_ms", one.parse * 1e3);
  out.add("resume_replay_s", one.replay);
  out.add("resume_state_vs_reach", one.restore / one.reach);
  out.add("resume_replay_vs_reach", one.replay / one.reach);
  out.add("interleave_reach_s", many.reach);
  out.add("interleave_save_ms", many.save * 1e3);
  out.add("interleave_state_kib", many.state_bytes / 1024);
  out.add("interleave_resume_state_ms", many.restore * 1e3);
  out.add("interleave_resume_state_vs_reach", many.restore / many.reach);
  out.add("interleave_resume_replay_vs_reach", many.replay / many.reach);
  out.add("goal_met", one.restore / one.reach <= 0.05 && many.restore / many.reach <= 0.05);
  out.print();
  return 0;
}
