// Graphs run as actor topologies compute what the reference interpreter computes, step after step;
// errors name the node; parameters, constants and input-less nodes are handled; independent
// branches run at the same time.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include "../support/cpu_burn.hpp"
#include "../support/skip.hpp"
#include "actors/graph_executor.hpp"
#include "actors/runtime.hpp"
#include "actors/tracing.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime/function.hpp"
#include "ops/runtime/backend.hpp"
#include "ops/runtime/interpreter.hpp"
#include "ops/op_registry.hpp"
#include "ops/random.hpp"

using namespace af;
using syms = std::vector<sym>;

namespace {

tensor random_tensor(const shape& dims, uint64_t seed) {
  auto t = random_uniform(dims, seed, dtype::f64, -1.0, 1.0);
  REQUIRE(t);
  return *t;
}

void check_equal(const tensor& a, const tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(x[i] - y[i]) <= 1e-12 * (1 + std::fabs(y[i])));
}

}  // namespace

TEST_CASE("an actor topology computes a graph like the interpreter, step after step", "[actors][graph]") {
  runtime rt{{.scheduler_threads = 2}};
  // Two independent branches (an MLP layer and attention) meet at the end; their kernels fuse.
  function fn{[](const syms& in) {
    auto mlp = relu(matmul(in[0], in[1]) + in[2]);
    auto att = matmul(softmax(matmul(in[3], in[3], false, true) / 4.0), in[3]);
    return syms{reduce_sum(mlp, {1}) + reduce_sum(att, {1}), in[2], mlp};
  }};
  const std::vector<graph::value_type> signature{
      {dtype::f64, {6, 5}}, {dtype::f64, {5, 4}}, {dtype::f64, {4}}, {dtype::f64, {6, 8}}};
  auto concrete = fn.concrete(signature);
  REQUIRE(concrete);
  auto exec = graph_executor::launch(rt, (*concrete)->optimized);
  REQUIRE(exec);
  CHECK(exec->actor_count() >= 6);
  for (uint64_t round = 0; round < 5; ++round) {
    const std::vector<tensor> args{random_tensor({6, 5}, round * 10 + 1), random_tensor({5, 4}, round * 10 + 2),
                                   random_tensor({4}, round * 10 + 3), random_tensor({6, 8}, round * 10 + 4)};
    auto got = exec->run(args);
    if (!got) FAIL(got.error_value().to_string());
    auto want = graph::interpret((*concrete)->optimized, args);
    REQUIRE(want);
    REQUIRE(got->size() == 3);
    for (std::size_t i = 0; i < got->size(); ++i) check_equal((*got)[i], (*want)[i]);
  }
}

TEST_CASE("an op failing inside the topology comes back naming its node, and the next step works", "[actors][graph]") {
  runtime rt{{.scheduler_threads = 2}};
  // Batch sizes are unknown when traced; a mismatch shows only when the add runs.
  function fn{[](const syms& in) { return syms{tanh(in[0]) + exp(in[1])}; },
              {.input_signature = std::vector<graph::value_type>{{dtype::f64, {-1, 3}}, {dtype::f64, {-1, 3}}}}};
  auto concrete = fn.concrete({{dtype::f64, {-1, 3}}, {dtype::f64, {-1, 3}}});
  REQUIRE(concrete);
  auto exec = graph_executor::launch(rt, (*concrete)->traced);
  REQUIRE(exec);
  auto bad = exec->run({random_tensor({2, 3}, 1), random_tensor({5, 3}, 2)});
  REQUIRE_FALSE(bad);
  CHECK(bad.error_value().code == errc::shape_mismatch);
  CHECK_THAT(bad.error_value().message, Catch::Contains("(add"));
  auto good = exec->run({random_tensor({4, 3}, 3), random_tensor({4, 3}, 4)});
  REQUIRE(good);
  CHECK(good->front().shape() == shape{4, 3});
  CHECK_FALSE(exec->run({random_tensor({4, 3}, 3)}));  // wrong argument count, refused up front
}

TEST_CASE("nodes without inputs arriving fire at each step", "[actors][graph]") {
  runtime rt{{.scheduler_threads = 2}};
  graph::graph_builder b;
  const auto x = b.parameter({dtype::f64, {4}}, "x");
  const op_attrs noise{{"shape", std::vector<int64_t>{4}}, {"dtype", std::string{"f64"}}, {"seed", int64_t{7}}};
  const auto r = *b.add("random_uniform", {}, noise);
  const auto y = *b.add("add", {x, r});
  auto exec = graph_executor::launch(rt, std::move(b).finish({y}));
  REQUIRE(exec);
  const auto xs = random_tensor({4}, 1);
  auto out = exec->run({xs});
  if (!out) FAIL(out.error_value().to_string());
  const auto expected_noise = *random_uniform({4}, 7, dtype::f64);
  const auto got = out->front().to_vector<double>(), a = xs.to_vector<double>(), n = expected_noise.to_vector<double>();
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(a[i] + n[i]));
}

TEST_CASE("nodes placed on a device allocate from its allocator and the rest run on the first", "[actors][graph]") {
  runtime rt{{.scheduler_threads = 2}};
  function fn{[](const syms& in) {
    auto hidden = relu(matmul(in[0], in[1]));  // unplaced: the first device
    device_scope on{in[0], "cpu:1"};
    return syms{reduce_sum(matmul(hidden, in[1], false, true), {1})};
  }};
  auto concrete = fn.concrete({{dtype::f64, {8, 6}}, {dtype::f64, {6, 6}}});
  REQUIRE(concrete);
  auto first = make_cpu_allocator({.name = "cpu:0"}).value();
  auto second = make_cpu_allocator({.name = "cpu:1"}).value();
  auto exec = graph_executor::launch(rt, (*concrete)->optimized, {.devices = {{"cpu:0", first, nullptr}, {"cpu:1", second, nullptr}}});
  REQUIRE(exec);
  const std::vector<tensor> args{random_tensor({8, 6}, 1), random_tensor({6, 6}, 2)};
  trace::clear();
  trace::start();
  auto got = exec->run(args);
  trace::stop();
  if (!got) FAIL(got.error_value().to_string());
  check_equal(got->front(), graph::interpret((*concrete)->optimized, args).value().front());
  // cpu:0 made the first matmul and relu; cpu:1 the second matmul and the sum.
  CHECK(first->stats().allocations >= 2);
  CHECK(second->stats().allocations >= 2);
  // Each node's kernel is a busy span on its device's row.
  std::size_t matmuls_on[2] = {0, 0};
  for (const auto& s : trace::collect())
    if (s.cat == trace::category::busy && s.name == "matmul") {
      if (s.actor.rfind("cpu:0/matmul#", 0) == 0) ++matmuls_on[0];
      if (s.actor.rfind("cpu:1/matmul#", 0) == 0) ++matmuls_on[1];
    }
  CHECK(matmuls_on[0] == 1);
  CHECK(matmuls_on[1] == 1);
}

TEST_CASE("a device's memory limit fails the step naming the node and the device", "[actors][graph]") {
  runtime rt{{.scheduler_threads = 2}};
  function fn{[](const syms& in) {
    device_scope on{in[0], "cpu:7"};
    return syms{matmul(in[0], in[0], false, true)};  // 256 x 256 doubles: 512 KiB
  }};
  auto concrete = fn.concrete({{dtype::f64, {256, 4}}});
  REQUIRE(concrete);
  auto small = make_cpu_allocator({.memory_limit = 64 << 10, .name = "cpu:7"}).value();
  auto exec = graph_executor::launch(rt, (*concrete)->optimized, {.devices = {{"cpu:0"}, {"cpu:7", small}}});
  REQUIRE(exec);
  auto got = exec->run({random_tensor({256, 4}, 3)});
  REQUIRE_FALSE(got);
  CHECK(got.error_value().code == errc::out_of_memory);
  const std::string& message = got.error_value().message;
  CHECK(message.find("matmul") != std::string::npos);
  CHECK(message.find("on cpu:7") != std::string::npos);
  CHECK(small->stats().bytes_in_use == 0);
}

TEST_CASE("a node placed on a device the executor lacks fails the launch naming both", "[actors][graph]") {
  runtime rt{{.scheduler_threads = 1}};
  function fn{[](const syms& in) {
    device_scope on{in[0], "cpu:3"};
    return syms{exp(in[0])};
  }};
  auto concrete = fn.concrete({{dtype::f64, {4}}});
  REQUIRE(concrete);
  auto exec = graph_executor::launch(rt, (*concrete)->optimized);
  REQUIRE_FALSE(exec);
  CHECK(exec.error_value().code == errc::invalid_argument);
  CHECK(exec.error_value().message.find("'cpu:3'") != std::string::npos);
  CHECK(exec.error_value().message.find("cpu:0") != std::string::npos);
  CHECK(exec.error_value().message.find("exp") != std::string::npos);
  auto twice = graph_executor::launch(rt, (*concrete)->optimized, {.devices = {{"cpu:3"}, {"cpu:3"}}});
  REQUIRE_FALSE(twice);
  CHECK(twice.error_value().message.find("listed twice") != std::string::npos);
}

TEST_CASE("independent branches of a graph run at the same time", "[actors][graph][timing]") {
  using clock_type = std::chrono::steady_clock;
  constexpr auto work = std::chrono::milliseconds(100);
  // exp and tanh of one input: two branches with nothing between them. Their kernels first burn
  // `work` of CPU time and note when they ran (wall clock).
  struct interval {
    std::atomic<int64_t> start{0}, end{0};
  };
  interval ran[2];
  auto ops = std::make_shared<op_registry>(*default_op_registry());
  for (int k = 0; k < 2; ++k) {
    const std::string op = k == 0 ? "exp" : "tanh";
    ops->add(op, [op, &span = ran[k], base = default_op_registry(), work](const std::vector<tensor>& in, const op_attrs& attrs) {
      span.start = clock_type::now().time_since_epoch().count();
      af::testing::burn_cpu(work);
      auto out = base->run(op, in, attrs);
      span.end = clock_type::now().time_since_epoch().count();
      return out;
    });
  }
  graph::graph_builder b;
  const auto x = b.parameter({dtype::f64, {4}}, "x");
  const auto e = *b.add("exp", {x});
  const auto t = *b.add("tanh", {x});
  runtime rt{{.scheduler_threads = 2}};
  auto exec = graph_executor::launch(rt, std::move(b).finish({e, t}), {.devices = {{"cpu:0", nullptr, ops}}});
  REQUIRE(exec);

  const auto xs = random_tensor({4}, 1);
  double best_overlap = 0, best_wall = 1e9;  // in units of `work`
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto start = clock_type::now();
    auto out = exec->run({xs});
    const auto wall = clock_type::now() - start;
    if (!out) FAIL(out.error_value().to_string());
    check_equal((*out)[0], exp(xs).value());
    check_equal((*out)[1], tanh(xs).value());
    // Burning thread CPU time, two branches on one thread cannot overlap; on two they overlap for
    // nearly the whole burn, however busy the machine (each then just takes longer).
    const int64_t overlap = std::min(ran[0].end.load(), ran[1].end.load()) - std::max(ran[0].start.load(), ran[1].start.load());
    best_overlap = std::max(best_overlap, static_cast<double>(overlap) / std::chrono::nanoseconds(work).count());
    best_wall = std::min(best_wall, std::chrono::duration<double>(wall) / work);
  }
  INFO("branches overlapped for " << best_overlap << " and the step took " << best_wall << " times the work of one");
  CHECK(best_overlap > 0.5);

  // The step's wall time shows it too, when the machine gives this process two cores: measured by
  // two plain threads burning the same.
  const auto start = clock_type::now();
  std::thread other{[&] { af::testing::burn_cpu(work); }};
  af::testing::burn_cpu(work);
  other.join();
  const double two_threads = std::chrono::duration<double>(clock_type::now() - start) / work;
  if (two_threads > 1.4) AF_SKIP("two threads burning " << work.count() << " ms each took " << two_threads << " times that: no two free cores");
  CHECK(best_wall < 1.6);
}

namespace {

// A CPU device that claims its tensors live elsewhere: the executor must copy values in and out
// of it. It counts what it is asked to do.
class far_memory_backend final : public backend {
 public:
  explicit far_memory_backend(std::string name) : inner_(make_cpu_backend({name})) {
    props_ = inner_->properties();
    props_.host_memory = false;
  }
  const backend_properties& properties() const noexcept override { return props_; }
  const std::shared_ptr<allocator>& memory() const noexcept override { return inner_->memory(); }
  bool supports(const graph::op_def& op) const override { return inner_->supports(op); }
  expected<std::vector<tensor>> run(const std::string& op, const std::vector<tensor>& in, const op_attrs& a) override {
    if (op == "copy") ++copies;
    return inner_->run(op, in, a);
  }
  expected<tensor> run_fused(const graph::fused_program& p, const std::vector<tensor>& in, const tensor* reuse) override {
    ++fused_runs;
    return inner_->run_fused(p, in, reuse);
  }
  expected<tensor> from_host(const tensor& t) override { return t.clone(); }
  expected<tensor> to_host(const tensor& t) override {
    ++to_host_calls;
    return t.clone();
  }
  expected<void> synchronize() override { return {}; }
  std::atomic<int> copies{0}, fused_runs{0}, to_host_calls{0};

 private:
  std::shared_ptr<backend> inner_;
  backend_properties props_;
};

}  // namespace

TEST_CASE("values crossing into a device without host memory are copied, and every node runs through its backend",
          "[actors][graph]") {
  runtime rt{{.scheduler_threads = 2}};
  function fn{[](const syms& in) {
    auto h = exp(in[0]) * 2.0;  // on the default device
    sym far = h;
    {
      device_scope on{in[0], "cpu:9"};
      far = tanh(h + in[1]) * 3.0;  // h and in[1] cross to cpu:9; tanh * 3 fuses there
    }
    return syms{far, h};
  }};
  auto concrete = fn.concrete({{dtype::f64, {8}}, {dtype::f64, {8}}});
  REQUIRE(concrete);
  auto far = std::make_shared<far_memory_backend>("cpu:9");
  std::ostringstream placements;
  auto exec = graph_executor::launch(rt, (*concrete)->optimized,
                                     {.devices = {{"cpu:0"}, {.name = "cpu:9", .device = far}},
                                      .log_device_placement = &placements});
  REQUIRE(exec);
  const auto x = random_tensor({8}, 1), y = random_tensor({8}, 2);
  auto got = exec->run({x, y});
  REQUIRE(got);
  auto want = graph::interpret((*concrete)->traced, {x, y});
  REQUIRE(want);
  for (std::size_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 8; ++k)
      CHECK((*got)[i].to_vector<double>()[static_cast<std::size_t>(k)] ==
            Approx((*want)[i].to_vector<double>()[static_cast<std::size_t>(k)]).epsilon(1e-12));
  CHECK(far->copies == 2);        // h and y, once each
  CHECK(far->fused_runs >= 1);    // fused nodes go through the backend too
  CHECK(far->to_host_calls == 1);  // the graph output made there comes back to host memory
  const std::string log = placements.str();
  CHECK_THAT(log, Catch::Contains("(copy") && Catch::Contains(": cpu:9") && Catch::Contains(": cpu:0"));
}

TEST_CASE("a device without a kernel for a node's op fails the launch naming both", "[actors][graph]") {
  runtime rt{{.scheduler_threads = 1}};
  function fn{[](const syms& in) { return syms{exp(in[0])}; }};
  auto concrete = fn.concrete({{dtype::f64, {4}}});
  REQUIRE(concrete);
  auto without_exp = std::make_shared<op_registry>();
  without_exp->add("tanh", [](const std::vector<tensor>& in, const op_attrs&) -> expected<std::vector<tensor>> {
    AF_TRY_ASSIGN(auto t, tanh(in[0]));
    return std::vector<tensor>{t};
  });
  auto exec = graph_executor::launch(rt, (*concrete)->optimized, {.devices = {{.name = "cpu:0", .ops = without_exp}}});
  REQUIRE_FALSE(exec);
  CHECK(exec.error_value().code == errc::unsupported);
  CHECK_THAT(exec.error_value().message, Catch::Contains("exp") && Catch::Contains("cpu:0"));
}
