// The CPU device actor and the op registry behind it.

#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "actors/caf_error.hpp"
#include "actors/device_actor.hpp"
#include "actors/runtime.hpp"

using af::tensor;

namespace {

constexpr auto timeout = std::chrono::seconds(30);

// Runs one op on `dev` and returns its outputs or its error.
af::expected<std::vector<tensor>> exec(caf::actor_system& sys, const af::device_actor& dev,
                                       const std::string& op, std::vector<tensor> inputs,
                                       af::op_attrs attrs = {}) {
  caf::scoped_actor self{sys};
  af::expected<std::vector<tensor>> result = af::make_error(af::errc::timeout, "no reply");
  self->request(dev, timeout, af::exec_atom::value, op, std::move(inputs), std::move(attrs))
      .receive([&](std::vector<tensor>& out) { result = std::move(out); },
               [&](caf::error& err) { result = af::from_caf_error(err); });
  return result;
}

}  // namespace

TEST_CASE("a device actor runs matmul and returns the product in its own memory", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto dev = af::spawn_cpu_device(rt.system(), {.name = "cpu:0"});
  REQUIRE(dev);
  auto a = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = tensor::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  auto out = exec(rt.system(), *dev, "matmul", {a, b});
  REQUIRE(out);
  REQUIRE(out->size() == 1);
  CHECK(af::all_close((*out)[0], tensor::from_vector<float>({4, 5, 10, 11}, {2, 2})));
  caf::scoped_actor self{rt.system()};
  self->request(*dev, timeout, af::stats_atom::value)
      .receive([&](const af::allocator_stats& stats) { CHECK(stats.bytes_in_use >= 4 * sizeof(float)); },
               [&](const caf::error& err) { FAIL(caf::to_string(err)); });
  out = af::make_error(af::errc::none, "");  // drop the output: the device's bytes come back
  self->request(*dev, timeout, af::stats_atom::value)
      .receive([&](const af::allocator_stats& stats) { CHECK(stats.bytes_in_use == 0); },
               [&](const caf::error& err) { FAIL(caf::to_string(err)); });
}

TEST_CASE("a device actor runs elementwise ops and reductions by name with their attributes", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto dev = af::spawn_cpu_device(rt.system());
  REQUIRE(dev);
  auto x = tensor::from_vector<float>({1, -2, 3, -4}, {2, 2});
  auto y = tensor::from_vector<float>({10, 20}, {2});
  auto sum = exec(rt.system(), *dev, "add", {x, y});  // broadcasting
  REQUIRE(sum);
  CHECK(af::all_close((*sum)[0], tensor::from_vector<float>({11, 18, 13, 16}, {2, 2})));
  auto prod = exec(rt.system(), *dev, "mul", {(*sum)[0], x});
  REQUIRE(prod);
  auto rows = exec(rt.system(), *dev, "reduce_sum", {(*prod)[0]}, {{"axes", std::vector<int64_t>{1}}});
  REQUIRE(rows);
  CHECK(af::all_close((*rows)[0], tensor::from_vector<float>({11 - 36, 39 - 64})));
  auto relu = exec(rt.system(), *dev, "relu", {x});
  REQUIRE(relu);
  CHECK(af::all_close((*relu)[0], tensor::from_vector<float>({1, 0, 3, 0}, {2, 2})));
  auto bad = exec(rt.system(), *dev, "add", {x, tensor::from_vector<float>({1, 2, 3})});
  REQUIRE_FALSE(bad);
  CHECK(bad.error_value().code == af::errc::shape_mismatch);
  CHECK(bad.error_value().message.find("add") != std::string::npos);
}

TEST_CASE("a device actor answers bad shapes with a shape_mismatch error that names the op", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto dev = af::spawn_cpu_device(rt.system());
  REQUIRE(dev);
  auto a = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto out = exec(rt.system(), *dev, "matmul", {a, a});
  REQUIRE_FALSE(out);
  CHECK(out.error_value().code == af::errc::shape_mismatch);
  CHECK(out.error_value().message.find("matmul") != std::string::npos);
  // The device survived and still serves.
  auto ok = exec(rt.system(), *dev, "matmul", {a, a}, {{"transpose_b", int64_t{1}}});
  REQUIRE(ok);
  CHECK((*ok)[0].shape() == af::shape{2, 2});
}

TEST_CASE("a device actor answers an unknown op or a wrong input count with invalid_argument", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto dev = af::spawn_cpu_device(rt.system());
  REQUIRE(dev);
  auto unknown = exec(rt.system(), *dev, "frobnicate", {});
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error_value().code == af::errc::invalid_argument);
  CHECK(unknown.error_value().message.find("frobnicate") != std::string::npos);
  auto arity = exec(rt.system(), *dev, "matmul", {tensor::scalar<float>(1)});
  REQUIRE_FALSE(arity);
  CHECK(arity.error_value().message == "matmul on cpu:0: op 'matmul' takes 2 inputs, got 1");
}

TEST_CASE("a device actor with a memory limit refuses outputs beyond it with out_of_memory", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  auto dev = af::spawn_cpu_device(rt.system(), {.name = "small", .memory = {.memory_limit = 4096}});
  REQUIRE(dev);
  auto big = tensor::full({64, 64}, 1.0, af::dtype::f32);
  REQUIRE(big);
  auto out = exec(rt.system(), *dev, "matmul", {*big, *big});
  REQUIRE_FALSE(out);
  CHECK(out.error_value().code == af::errc::out_of_memory);
  CHECK(out.error_value().message.find("matmul on small") != std::string::npos);
}

TEST_CASE("a device actor serves concurrent requests one at a time, each sender's in order", "[actors]") {
  af::runtime rt{{.scheduler_threads = 2}};
  std::atomic<int> active{0};
  std::atomic<int> most_active{0};
  std::mutex log_mtx;
  std::vector<std::pair<int64_t, int64_t>> log;  // (sender, sequence) in execution order
  auto ops = std::make_shared<af::op_registry>();
  ops->add("record", [&](const std::vector<tensor>& in, const af::op_attrs& attrs)
                         -> af::expected<std::vector<tensor>> {
    int now = ++active;
    int seen = most_active.load();
    while (now > seen && !most_active.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // simulated kernel time
    {
      std::lock_guard<std::mutex> guard{log_mtx};
      log.emplace_back(*attrs.get_int("sender"), *attrs.get_int("seq"));
    }
    --active;
    return in;
  });
  auto dev = af::spawn_cpu_device(rt.system(), {.ops = ops});
  REQUIRE(dev);
  constexpr int senders = 4;
  constexpr int per_sender = 25;
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> replies(senders);
  for (int s = 0; s < senders; ++s) {
    threads.emplace_back([&, s] {
      caf::scoped_actor self{rt.system()};
      for (int i = 0; i < per_sender; ++i)  // all in flight at once; results come back as messages
        self->send(*dev, af::exec_atom::value, std::string{"record"},
                   std::vector<tensor>{tensor::scalar<int64_t>(i)},
                   af::op_attrs{{"sender", int64_t{s}}, {"seq", int64_t{i}}});
      for (int i = 0; i < per_sender; ++i)
        self->receive([&](std::vector<tensor>& out) { replies[s].push_back(out[0].item<int64_t>()); },
                      caf::after(timeout) >> [] {});
    });
  }
  for (auto& t : threads) t.join();
  CHECK(most_active.load() == 1);
  REQUIRE(log.size() == senders * per_sender);
  std::vector<int64_t> next(senders, 0);
  for (auto [sender, seq] : log) CHECK(seq == next[sender]++);
  std::vector<int64_t> in_order(per_sender);
  for (int i = 0; i < per_sender; ++i) in_order[i] = i;
  for (int s = 0; s < senders; ++s) CHECK(replies[s] == in_order);
}

TEST_CASE("op attributes read with defaults, reject the wrong kind, and survive serialisation", "[actors]") {
  af::op_attrs attrs{{"axis", int64_t{1}}, {"scale", 0.5}, {"ksize", std::vector<int64_t>{3, 3}},
                     {"padding", std::string{"same"}}};
  CHECK(*attrs.get_int("axis") == 1);
  CHECK(*attrs.get_float("axis") == 1.0);  // an int is a number
  CHECK(*attrs.get_int("missing", 7) == 7);
  CHECK_FALSE(attrs.get_int("missing"));
  CHECK(attrs.get_int("padding").error_value().message == "attribute 'padding' is not an integer");
  af::runtime rt{{.scheduler_threads = 1}};
  std::vector<char> bytes;
  caf::binary_serializer sink{rt.system(), bytes};
  REQUIRE_FALSE(sink(attrs));
  af::op_attrs back;
  caf::binary_deserializer source{rt.system(), bytes};
  REQUIRE_FALSE(source(back));
  CHECK(back == attrs);
}

TEST_CASE("the default op registry names its kernels and turns a throwing kernel into an error", "[actors]") {
  auto ops = af::default_op_registry();
  for (const char* name : {"add", "mul", "relu", "reduce_sum", "matmul", "conv2d", "max_pool2d", "softmax",
                           "concat", "gather"})
    CHECK(ops->contains(name));
  af::op_registry custom = *ops;
  custom.add("explode", [](const std::vector<tensor>&, const af::op_attrs&) -> af::expected<std::vector<tensor>> {
    throw std::runtime_error("kaboom");
  });
  auto out = custom.run("explode", {}, {});
  REQUIRE_FALSE(out);
  CHECK(out.error_value().message == "explode: kernel threw: kaboom");
  auto sm = custom.run("softmax", {tensor::from_vector<float>({0, 0})}, {});
  REQUIRE(sm);
  CHECK(af::all_close((*sm)[0], tensor::from_vector<float>({0.5f, 0.5f})));
}
