// Loading a SavedModel with ~200 MB of variables against reading the same bytes with read(2), and
// the latency of its first prediction (which checks the variables' digests) and of later ones,
// measured in the same run. Both read from the page cache: the file was just written.
//
//   build/bench/bench_saved_model [--quick]     (--quick: ~67 MB of variables)

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "bench_common.hpp"
#include "ops/random.hpp"
#include "ops/train/layers.hpp"
#include "serialization/saved_model.hpp"

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "bench_saved_model: %s\n", why.c_str());
  std::exit(1);
}

// read(2) of the whole file into a fresh buffer, as a loader that copies would.
std::size_t read_whole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open " + path);
  const auto size = static_cast<std::size_t>(std::filesystem::file_size(path));
  std::unique_ptr<char[]> buffer{new char[size]};
  std::size_t done = 0;
  while (done < size) {
    const ssize_t r = ::read(fd, buffer.get() + done, size - done);
    if (r <= 0) fail("cannot read " + path);
    done += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return static_cast<std::size_t>(buffer[size / 2]) + done;  // keeps the read from being dropped
}

}  // namespace

int main(int argc, char** argv) {
  af::bench::check_flags(argc, argv, "build/bench/bench_saved_model [--quick]", {"--quick"});
  const bool quick = af::bench::has_flag(argc, argv, "--quick");
  const int64_t hidden = quick ? 1024 : 5120;  // variables: 1024*8192 + 8192*hidden floats
  const int reps = quick ? 5 : 9;
  auto x = af::nn::input({1024}, af::dtype::f32, "features");
  auto h = af::nn::dense(8192, {.activation = "relu"})(x);
  h = af::nn::dense(hidden, {.activation = "relu"})(h);
  auto y = af::nn::dense(10, {.name = "logits"})(h);
  auto model = af::nn::model::functional({x}, {y}, {.seed = 1});
  if (!model) fail(model.error_value().to_string());

  const auto root = std::filesystem::temp_directory_path() / ("af_bench_saved_model_" + std::to_string(::getpid()));
  const std::string dir = (root / "1").string();
  const double save_s = af::bench::seconds_of([&] {
    if (auto ok = af::saved_model::save(*model, dir); !ok) fail(ok.error_value().to_string());
  });
  const std::string data = dir + "/variables/data";
  const auto bytes = static_cast<double>(std::filesystem::file_size(data));

  const double read_s = af::bench::median_seconds(reps, [&] { read_whole(data); });
  const double load_s = af::bench::median_seconds(reps, [&] {
    if (!af::saved_model::load(dir)) fail("load failed");
  });
  const double load_verified_s = af::bench::median_seconds(reps, [&] {
    if (!af::saved_model::load(dir, {.verify_variables_now = true})) fail("load failed");
  });
  const af::tensor one = af::random_normal({1, 1024}, 2).value();
  std::vector<double> first_call, later_call;
  for (int r = 0; r < reps; ++r) {
    auto loaded = af::saved_model::load(dir);
    if (!loaded) fail(loaded.error_value().to_string());
    first_call.push_back(af::bench::seconds_of([&] {
      if (!loaded->call("serving_default", {one})) fail("call failed");
    }));
    later_call.push_back(af::bench::seconds_of([&] {
      if (!loaded->call("serving_default", {one})) fail("call failed");
    }));
  }
  std::error_code ec;
  std::filesystem::remove_all(root, ec);

  const double load_ratio = load_s / read_s;
  std::printf("variables %.0f MB; save %.0f ms\n", bytes / 1e6, save_s * 1e3);
  std::printf("read(2) of variables/data  %8.2f ms  (%.1f GB/s)\n", read_s * 1e3, bytes / read_s / 1e9);
  std::printf("load (mapped)              %8.2f ms  %.3fx read (goal <= 0.3)\n", load_s * 1e3, load_ratio);
  std::printf("load, digests checked      %8.2f ms  %.3fx read\n", load_verified_s * 1e3, load_verified_s / read_s);
  std::printf("first prediction (batch 1) %8.2f ms  (checks the digests)\n", af::bench::median(first_call) * 1e3);
  std::printf("later prediction (batch 1) %8.2f ms\n", af::bench::median(later_call) * 1e3);
  std::printf("{\"variables_mb\": %.1f, \"read_ms\": %.3f, \"load_ms\": %.3f, \"load_vs_read\": %.4f, "
              "\"load_verified_ms\": %.3f, \"load_verified_vs_read\": %.4f, \"first_prediction_ms\": %.3f, "
              "\"later_prediction_ms\": %.3f, \"save_ms\": %.1f}\n",
              bytes / 1e6, read_s * 1e3, load_s * 1e3, load_ratio, load_verified_s * 1e3, load_verified_s / read_s,
              af::bench::median(first_call) * 1e3, af::bench::median(later_call) * 1e3, save_s * 1e3);
  return 0;
}
