// Input pipeline throughput: TFRecord files of Examples (a 32x32x3 uint8 image and an int64 label)
// read with interleave(read -> parse -> decode (float32 / 255, random horizontal flip)) -> shuffle(10000)
// -> batch(256) -> prefetch, against the same work as a hand-written loop on the same number of
// threads (no actors), measured in the same run.
//
// A second part times a map burning ~1 ms of CPU per element at parallelism 1, 2 and autotune.
//
//   build/bench/bench_pipeline [--quick] [--profile] [--records N] [--files K] [--threads T]
//                              [--scheduler-threads S] [--dir PATH] [--no-burn] [--pipeline-only | --raw-only]
//                              [--caf "--work-stealing.moderate-sleep-duration=20us"]...
//   (--dir keeps the files there, for bench/tfdata_reference.py --dir PATH)

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "actors/runtime.hpp"
#include "bench_common.hpp"
#include "../tests/support/cpu_burn.hpp"
#include "ops/allocator.hpp"
#include "pipeline/dataset.hpp"
#include "pipeline/element_ops.hpp"
#include "pipeline/iterator.hpp"
#include "pipeline/profiler.hpp"
#include "pipeline/records.hpp"
#include "serialization/example.hpp"
#include "serialization/tfrecord.hpp"

namespace {

using namespace af;
namespace fs = std::filesystem;

constexpr int64_t side = 32, channels = 3;
constexpr std::size_t image_bytes = side * side * channels;
constexpr std::size_t shuffle_buffer = 10000, batch_size = 256;

int64_t flag_value(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::stoll(argv[i + 1]);
  return fallback;
}

// Writes `records` Examples round-robin into `files` files; returns their paths.
std::vector<std::string> write_files(const fs::path& dir, int64_t records, int64_t files) {
  fs::create_directories(dir);
  std::vector<tfrecord_writer> writers;
  std::vector<std::string> paths;
  for (int64_t f = 0; f < files; ++f) {
    paths.push_back((dir / ("train-" + std::to_string(f) + ".tfrecord")).string());
    auto w = tfrecord_writer::open(paths.back());
    if (!w) throw std::runtime_error(w.error_value().message);
    writers.push_back(std::move(*w));
  }
  std::mt19937 rng{1};
  std::string image(image_bytes, '\0');
  std::string encoded;
  for (int64_t r = 0; r < records; ++r) {
    for (auto& c : image) c = static_cast<char>(rng() & 0xff);
    example ex;
    ex.features["image"] = feature::bytes({image});
    ex.features["label"] = feature::int64s({static_cast<int64_t>(rng() % 10)});
    encoded.clear();
    encode_example(ex, encoded);
    if (auto ok = writers[static_cast<std::size_t>(r % files)].write(encoded); !ok)
      throw std::runtime_error(ok.error_value().message);
  }
  for (auto& w : writers)
    if (auto ok = w.close(); !ok) throw std::runtime_error(ok.error_value().message);
  return paths;
}

feature_spec spec() {
  return {{"image", fixed_len(dtype::u8, {side, side, channels})}, {"label", fixed_len(dtype::i64, {})}};
}

// uint8 HWC -> float32 / 255, mirrored left-right when `flip`.
void decode_into(const uint8_t* src, float* dst, bool flip) {
  for (int64_t y = 0; y < side; ++y)
    for (int64_t x = 0; x < side; ++x) {
      const int64_t sx = flip ? side - 1 - x : x;
      for (int64_t c = 0; c < channels; ++c)
        dst[(y * side + x) * channels + c] = static_cast<float>(src[(y * side + sx) * channels + c]) * (1.0f / 255.0f);
    }
}

bool coin() {
  thread_local std::mt19937 rng{std::random_device{}()};
  return (rng() & 1) != 0;
}

expected<element> decode(element e) {
  const tensor* raw = e.find("image");
  auto out = tensor::empty({side, side, channels}, dtype::f32);
  if (!out) return out.error_value();
  decode_into(raw->data<uint8_t>(), out->data<float>(), coin());
  e.set("image", std::move(*out));
  return e;
}

double process_cpu_s() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// Wall and CPU seconds (all threads of the process) of one run.
struct timed_run {
  double wall_s = 0, cpu_s = 0;
  double cpu_us_per(int64_t elements) const { return 1e6 * cpu_s / static_cast<double>(elements); }
  double cores() const { return cpu_s / wall_s; }
};

timed_run time_run(const std::function<void()>& fn) {
  const double cpu_before = process_cpu_s();
  const double wall = af::bench::seconds_of(fn);
  return {wall, process_cpu_s() - cpu_before};
}

// The run of median wall time.
timed_run median_run(std::vector<timed_run> runs) {
  std::sort(runs.begin(), runs.end(), [](const timed_run& a, const timed_run& b) { return a.wall_s < b.wall_s; });
  return runs[runs.size() / 2];
}

// The pipeline under test; returns elements seen.
int64_t run_pipeline(runtime& rt, const std::vector<std::string>& files, int64_t threads, bool profile = false) {
  // Each file's records are parsed and decoded where they are read: interleave runs `threads`
  // files at once, each as its own actor, so the per-record work is spread like the raw loop's.
  auto parse = data::parse_example_fn(spec());
  auto ds = data::dataset::list_files((fs::path(files.front()).parent_path() / "train-*.tfrecord").string())
           .interleave([parse](const element& f) -> expected<data::dataset> {
             return data::dataset::from_tfrecord(f).map(parse, 1, true, "parse").map(decode, 1, true, "decode");
           }, threads, 16)
           .shuffle(shuffle_buffer, 7)
           .batch(batch_size)
           .prefetch(4);
  int64_t seen = 0;
  auto it = ds.iterate(rt);
  std::optional<data::profiler> prof;
  if (profile) prof.emplace(it);
  for (auto& b : it) seen += b.find("label")->dim(0);
  if (it.status()) throw std::runtime_error(it.status().message);
  if (prof) std::printf("%s", prof->report().to_string().c_str());
  return seen;
}

// Elements/s of range(n) -> map(burn ~1 ms of CPU, parallelism) -> prefetch(autotune).
double burn_rate(runtime& rt, int64_t n, int64_t parallelism) {
  auto ds = data::dataset::range(n)
                .map([](element e) -> expected<element> {
                  af::testing::burn_cpu(std::chrono::milliseconds(1));
                  return e;
                }, parallelism)
                .prefetch(data::autotune);
  int64_t seen = 0;
  const double s = af::bench::seconds_of([&] {
    auto it = ds.iterate(rt, {.period_ms = 20});
    for (auto& e : it) seen += e.find("value") ? 1 : 0;
  });
  if (seen != n) throw std::runtime_error("burn pipeline lost elements");
  return static_cast<double>(n) / s;
}

// The same work without actors: each thread reads its share of the files, parses, decodes, keeps
// a shuffle window of its share of the buffer and stacks batches.
int64_t run_raw_loop(const std::vector<std::string>& files, int64_t threads) {
  std::atomic<int64_t> seen{0};
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      auto parser = example_parser::make(spec());
      std::mt19937_64 rng{static_cast<uint64_t>(t) + 7};
      std::vector<element> window, batch;
      const std::size_t window_size = shuffle_buffer / static_cast<std::size_t>(threads);
      auto emit = [&](element e) {
        batch.push_back(std::move(e));
        if (batch.size() == batch_size) {
          auto stacked = data::stack_elements(batch);
          seen += stacked->find("label")->dim(0);
          batch.clear();
        }
      };
      for (std::size_t f = static_cast<std::size_t>(t); f < files.size(); f += static_cast<std::size_t>(threads)) {
        auto reader = tfrecord_reader::open(files[f]);
        for (;;) {
          auto rec = reader->next_view();
          if (!rec || !rec->has_value()) break;
          auto parsed = parser->parse((*rec)->data);
          auto decoded = decode(std::move(*parsed));
          if (window.size() < window_size) {
            window.push_back(std::move(*decoded));
            continue;
          }
          const std::size_t pick = std::uniform_int_distribution<std::size_t>{0, window.size() - 1}(rng);
          emit(std::move(window[pick]));
          window[pick] = std::move(*decoded);
        }
      }
      std::shuffle(window.begin(), window.end(), rng);
      for (auto& e : window) emit(std::move(e));
      if (!batch.empty()) seen += data::stack_elements(batch)->find("label")->dim(0);
    });
  for (auto& th : pool) th.join();
  return seen.load();
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv,
                         "build/bench/bench_pipeline [--quick] [--profile] [--records N] [--files K] [--threads T] "
                         "[--scheduler-threads S] [--dir PATH] [--no-burn] [--pipeline-only | --raw-only] [--caf CAF_OPTION]...",
                         {"--quick", "--profile", "--no-burn", "--pipeline-only", "--raw-only"},
                         {"--records", "--files", "--threads", "--scheduler-threads", "--dir", "--caf"});
  const bool quick = af::bench::has_flag(argc, argv, "--quick");
  const int64_t records = flag_value(argc, argv, "--records", 50000);
  const int64_t files = flag_value(argc, argv, "--files", 8);
  const int64_t threads = flag_value(argc, argv, "--threads", std::max(2u, std::thread::hardware_concurrency()));
  const int reps = quick ? 3 : 5;
  const fs::path dir = fs::temp_directory_path() / ("actorflow_bench_pipeline_" + std::to_string(::getpid()));
  std::string dir_flag;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--dir") == 0) dir_flag = argv[i + 1];
  const fs::path where = dir_flag.empty() ? dir : fs::path{dir_flag};

  std::printf("writing %lld Examples (32x32x3 uint8 image + int64 label) into %lld files under %s\n",
              static_cast<long long>(records), static_cast<long long>(files), where.c_str());
  auto paths = write_files(where, records, files);

  // One scheduler thread per core, like the raw loop's threads: more threads than cores only add
  // time-slicing and idle polling between the stages' hand-offs.
  std::vector<std::string> caf_args;  // --caf "--work-stealing.moderate-sleep-duration=20us" etc.
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--caf") == 0) caf_args.push_back(argv[i + 1]);
  af::runtime rt{{.scheduler_threads = static_cast<int>(flag_value(argc, argv, "--scheduler-threads", threads)),
                  .caf_args = caf_args}};
  int64_t pipeline_seen = 0, raw_seen = 0;
  af::cpu_allocator()->reset_peak();
  std::vector<timed_run> pipeline_runs, raw_runs;
  if (af::bench::has_flag(argc, argv, "--pipeline-only")) {  // for perf and profilers: nothing else runs
    for (int r = 0; r < reps; ++r) {
      auto run = time_run([&] { pipeline_seen = run_pipeline(rt, paths, threads); });
      std::printf("pipeline only: %.0f elements/s, %.2f us CPU per element, %.2f cores busy\n",
                  static_cast<double>(pipeline_seen) / run.wall_s, run.cpu_us_per(pipeline_seen), run.cores());
    }
    return 0;
  }
  if (af::bench::has_flag(argc, argv, "--raw-only")) {  // the baseline alone, for the same profilers
    for (int r = 0; r < reps; ++r) {
      auto run = time_run([&] { raw_seen = run_raw_loop(paths, threads); });
      std::printf("raw loop only: %.0f elements/s, %.2f us CPU per element, %.2f cores busy\n",
                  static_cast<double>(raw_seen) / run.wall_s, run.cpu_us_per(raw_seen), run.cores());
    }
    return 0;
  }
  // Warm up (page cache, allocator); --profile prints where each stage's time went.
  run_pipeline(rt, paths, threads, af::bench::has_flag(argc, argv, "--profile"));
  af::cpu_allocator()->reset_peak();
  for (int r = 0; r < reps; ++r) {
    // Alternate the two so that machine noise hits both alike.
    raw_runs.push_back(time_run([&] { raw_seen = run_raw_loop(paths, threads); }));
    pipeline_runs.push_back(time_run([&] { pipeline_seen = run_pipeline(rt, paths, threads); }));
  }
  const std::size_t peak = af::cpu_allocator()->stats().peak_bytes_in_use;
  if (pipeline_seen != records || raw_seen != records) {
    std::fprintf(stderr, "bench_pipeline: saw %lld (pipeline) and %lld (raw loop) of %lld records\n",
                 static_cast<long long>(pipeline_seen), static_cast<long long>(raw_seen),
                 static_cast<long long>(records));
    return 1;
  }
  // A map burning ~1 ms per element: what a second worker buys, and what autotune finds from 1.
  const bool burn = !af::bench::has_flag(argc, argv, "--no-burn");
  const int64_t burn_n = quick ? 300 : 1000;
  std::vector<double> burn1, burn2, burn_auto;
  for (int r = 0; burn && r < reps; ++r) {
    burn1.push_back(burn_rate(rt, burn_n, 1));
    burn2.push_back(burn_rate(rt, burn_n, 2));
    burn_auto.push_back(burn_rate(rt, burn_n, data::autotune));
  }
  const timed_run pipeline_run = median_run(pipeline_runs), raw_run = median_run(raw_runs);
  const double pipeline_rate = static_cast<double>(records) / pipeline_run.wall_s;
  const double raw_rate = static_cast<double>(records) / raw_run.wall_s;
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  std::printf("pipeline %.0f elements/s, raw loop %.0f elements/s on %lld threads (median of %d)\n", pipeline_rate,
              raw_rate, static_cast<long long>(threads), reps);
  if (dir_flag.empty()) fs::remove_all(where);

  af::bench::json_line out;
  out.add("bench", std::string{"pipeline"});
  out.add("records", static_cast<double>(records));
  out.add("files", static_cast<double>(files));
  out.add("threads", static_cast<double>(threads));
  out.add("elements_per_s", pipeline_rate);
  out.add("raw_loop_elements_per_s", raw_rate);
  out.add("ratio_vs_raw_loop", pipeline_rate / raw_rate);
  out.add("peak_bytes", static_cast<double>(peak));
  // Where a gap comes from: CPU spent per element (overhead) and cores kept busy (hand-offs).
  out.add("cpu_us_per_element", pipeline_run.cpu_us_per(records));
  out.add("raw_loop_cpu_us_per_element", raw_run.cpu_us_per(records));
  out.add("cores_busy", pipeline_run.cores());
  out.add("raw_loop_cores_busy", raw_run.cores());
  out.add("max_rss_bytes", static_cast<double>(usage.ru_maxrss) * 1024.0);
  if (burn) {
    out.add("burn_1ms_parallelism1_elements_per_s", af::bench::median(burn1));
    out.add("burn_1ms_parallelism2_elements_per_s", af::bench::median(burn2));
    out.add("burn_1ms_autotune_elements_per_s", af::bench::median(burn_auto));
    out.add("burn_speedup_parallelism2", af::bench::median(burn2) / af::bench::median(burn1));
    out.add("burn_speedup_autotune", af::bench::median(burn_auto) / af::bench::median(burn1));
  }
  out.print();
  return 0;
}
