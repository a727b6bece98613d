// `actorflow topology-demo`: tensors flowing through an actor topology, end to end.
//
//   source "batches" --> transform "normalize" --> transform "dense_relu" --> reader (this thread)
//                                                                          \-> cpu:0 device actor
// Each stage is an actor with bounded output slots under credit flow control. The demo checks the
// streamed results against a direct computation, asks a device actor to run the same layer, writes
// a Chrome trace (open it in https://ui.perfetto.dev) and prints where each stage spent its time.

#include <caf/all.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "actors/device_actor.hpp"
#include "actors/runtime.hpp"
#include "actors/stage.hpp"
#include "actors/tracing.hpp"
#include "apps/commands.hpp"
#include "apps/parse_count.hpp"
#include "ops/elementwise.hpp"
#include "ops/linalg.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"

namespace af::apps {

namespace {

constexpr int64_t batch_size = 64;
constexpr int64_t features = 784;
constexpr int64_t hidden = 256;

expected<tensor> normalize(const tensor& raw) {
  // Pixels arrive in [0, 1); centre and scale them to [-1, 1).
  AF_TRY_ASSIGN(tensor shifted, sub(raw, 0.5));
  return mul(shifted, 2.0);
}

expected<tensor> dense_relu(const tensor& x, const tensor& w, const tensor& b) {
  AF_TRY_ASSIGN(tensor y, matmul(x, w));
  AF_TRY_ASSIGN(tensor biased, add(y, b));
  return relu(biased);
}

int fail(const char* where, const error& err) {
  std::fprintf(stderr, "demo: %s: %s\n", where, err.to_string().c_str());
  return 1;
}

}  // namespace

int run_topology_demo(int argc, char** argv) {
  int64_t batches = 400;
  std::string trace_path = "actorflow_topology_trace.json";
  for (int i = 1; i < argc; ++i) {
    const std::optional<int64_t> count = i + 1 < argc ? parse_count(argv[i + 1]) : std::nullopt;
    if (std::strcmp(argv[i], "--batches") == 0 && count) {
      batches = *count;
      ++i;
    } else if (std::strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
      trace_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: actorflow topology-demo [--batches N (1 or more)] [--trace FILE]\n");
      return 2;
    }
  }

  runtime rt;
  auto w = random_normal({features, hidden}, /*seed=*/7, dtype::f32, 0.0, 0.05);
  auto b = tensor::full({hidden}, 0.01, dtype::f32);
  if (!w || !b) return fail("weights", w ? b.error_value() : w.error_value());

  // The description: immutable, printable, launched by iterate().
  auto next_index = std::make_shared<int64_t>(0);
  auto p = pipeline::from_generator(
               "batches",
               [next_index, batches]() -> expected<std::optional<element>> {
                 if (*next_index == batches) return std::optional<element>{};
                 const int64_t i = (*next_index)++;
                 AF_TRY_ASSIGN(tensor pixels, random_uniform({batch_size, features}, 1000 + i));
                 return std::optional<element>{element{{"index", tensor::scalar<int64_t>(i)}, {"x", pixels}}};
               },
               {.slots = 4})
               .transform("normalize",
                          [](element e) -> expected<std::vector<element>> {
                            AF_TRY_ASSIGN(tensor x, normalize(*e.find("x")));
                            e.set("x", std::move(x));
                            return std::vector<element>{std::move(e)};
                          },
                          {.slots = 2})
               .transform("dense_relu",
                          [w = *w, b = *b](element e) -> expected<std::vector<element>> {
                            AF_TRY_ASSIGN(tensor h, dense_relu(*e.find("x"), w, b));
                            e.set("h", std::move(h));
                            return std::vector<element>{std::move(e)};
                          },
                          {.slots = 2});
  std::printf("topology (%zu slots in all):\n%s\n", p.total_slots(), p.to_dot().c_str());

  trace::start();
  const auto start = std::chrono::steady_clock::now();
  double checksum = 0;
  int64_t received = 0;
  element last;
  auto stream = iterate(rt, p, {.slots = 4, .name = "reader"});
  for (auto& e : stream) {
    auto total = reduce_sum(*e.find("h"));
    if (!total) return fail("reduce_sum", total.error_value());
    checksum += total->item<double>();
    ++received;
    last = e;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  trace::stop();
  if (stream.status()) return fail("pipeline", stream.status());
  std::printf("streamed %lld batches of [%lld,%lld] in %.3f s: %.0f batches/s, %.0f samples/s\n",
              static_cast<long long>(received), static_cast<long long>(batch_size),
              static_cast<long long>(features), seconds, received / seconds, received * batch_size / seconds);
  std::printf("checksum of all activations: %.6e\n", checksum);

  // The last batch, recomputed directly, must equal what came through the actors.
  const int64_t last_index = last.find("index")->item<int64_t>();
  auto again = random_uniform({batch_size, features}, 1000 + last_index);
  auto direct = again ? normalize(*again) : again;
  auto expected_h = direct ? dense_relu(*direct, *w, *b) : direct;
  if (!expected_h) return fail("direct computation", expected_h.error_value());
  const bool same = all_equal(*last.find("h"), *expected_h);
  std::printf("last batch (#%lld) equals the direct computation: %s\n", static_cast<long long>(last_index),
              same ? "yes" : "NO");

  // The same layer's matmul on a CPU device actor: a request with tensors in, tensors out.
  auto device = spawn_cpu_device(rt.system());
  if (!device) return fail("device", device.error_value());
  caf::scoped_actor self{rt.system()};
  bool device_ok = false;
  self->request(*device, std::chrono::seconds(30), exec_atom::value, std::string("matmul"),
                std::vector<tensor>{*direct, *w}, op_attrs{})
      .receive(
          [&](const std::vector<tensor>& out) {
            auto expected_y = matmul(*direct, *w);
            device_ok = expected_y && all_equal(out.at(0), *expected_y);
          },
          [&](const caf::error& err) { std::fprintf(stderr, "device: %s\n", rt.system().render(err).c_str()); });
  self->request(*device, std::chrono::seconds(30), exec_atom::value, std::string("matmul"),
                std::vector<tensor>{*w, *w}, op_attrs{})
      .receive([&](const std::vector<tensor>&) { std::printf("device: a bad matmul unexpectedly succeeded\n"); },
               [&](const caf::error& err) {
                 std::printf("device cpu:0 rejects a bad request with: %s\n", rt.system().render(err).c_str());
               });
  std::printf("device cpu:0 matmul equals the direct one: %s\n", device_ok ? "yes" : "NO");
  self->send_exit(*device, caf::exit_reason::user_shutdown);

  auto spans = trace::collect();
  if (auto written = trace::write_chrome_trace(trace_path, spans); !written)
    return fail("trace", written.error_value());
  std::printf("wrote %zu spans to %s (open in https://ui.perfetto.dev)\n", spans.size(), trace_path.c_str());
  std::printf("%s\n", trace::summarize(spans).to_string().c_str());
  return same && device_ok ? 0 : 1;
}

}  // namespace af::apps
