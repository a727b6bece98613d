// The batching topology: concurrent requests are joined into batches and each gets its own rows
// back; batches are padded to an allowed size; a lone request waits only batch_timeout; a full
// queue and a deadline that cannot be met are refused at once without running; bad requests and a
// failing model are named; shutting down answers what waits and never hangs.

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

#include "actors/batching.hpp"
#include "actors/runtime.hpp"
#include "../support/eventually.hpp"
#include "../support/skip.hpp"

using namespace af;
using namespace std::chrono_literals;
using serving::batching_queue;
using serving::batching_options;
using serving::clock_type;

namespace {

const std::vector<graph::tensor_spec> one_input{{"x", graph::value_type{dtype::f32, {-1, 2}}}};

tensor row(float a, float b) { return tensor::from_vector<float>({a, b}, {1, 2}); }

// Doubles its input; records the rows of every batch it ran.
struct doubling_model {
  std::mutex mtx;
  std::vector<int64_t> batch_rows;
  std::chrono::milliseconds work{0};
  expected<std::vector<tensor>> operator()(const std::vector<tensor>& in) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      batch_rows.push_back(in[0].dim(0));
    }
    if (work.count()) std::this_thread::sleep_for(work);
    auto v = in[0].to_vector<float>();
    for (float& x : v) x *= 2;
    return std::vector<tensor>{tensor::from_vector<float>(v, in[0].shape())};
  }
};

// A model that blocks until released, so that requests pile up behind a running batch.
struct gate {
  std::mutex mtx;
  std::condition_variable cv;
  bool open = false;
  int entered = 0;
  void wait() {
    std::unique_lock<std::mutex> lock{mtx};
    ++entered;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void wait_entered(int n) {
    std::unique_lock<std::mutex> lock{mtx};
    cv.wait(lock, [&] { return entered >= n; });
  }
  void release() {
    std::lock_guard<std::mutex> guard{mtx};
    open = true;
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("concurrent single-row requests are batched and each gets its own rows back", "[batching]") {
  runtime rt{{.scheduler_threads = 2}};
  auto model = std::make_shared<doubling_model>();
  model->work = 2ms;
  auto q = batching_queue::start(rt, [model](const std::vector<tensor>& in) { return (*model)(in); },
                                 {.max_batch_size = 8, .batch_timeout = 2ms, .num_batch_threads = 2}, one_input);
  REQUIRE(q);
  constexpr int threads = 8, per_thread = 25;
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const float v = static_cast<float>(t * 1000 + i);
        auto y = q->predict({row(v, -v)});
        if (!y || (*y)[0].to_vector<float>() != std::vector<float>{2 * v, -2 * v}) ++wrong;
      }
    });
  for (auto& c : callers) c.join();
  CHECK(wrong.load() == 0);
  const auto s = q->stats();
  CHECK(s.requests == threads * per_thread);
  CHECK(s.rows == threads * per_thread);
  CHECK(s.batches < s.requests / 2);  // batching happened
  std::lock_guard<std::mutex> guard{model->mtx};
  CHECK(*std::max_element(model->batch_rows.begin(), model->batch_rows.end()) <= 8);
}

TEST_CASE("predict_async wakes the batcher about once a batch, and refuses on the caller's thread", "[batching]") {
  runtime rt{{.scheduler_threads = 2}};
  auto model = std::make_shared<doubling_model>();
  model->work = 1ms;
  auto q = batching_queue::start(rt, [model](const std::vector<tensor>& in) { return (*model)(in); },
                                 {.max_batch_size = 8, .batch_timeout = 5ms, .max_enqueued_batches = 64}, one_input);
  REQUIRE(q);
  constexpr int threads = 4, per_thread = 100;  // all of them fit in the queue at once
  std::atomic<int> right{0}, answered{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const float v = static_cast<float>(t * 1000 + i);
        q->predict_async({row(v, -v)}, std::nullopt, [&, v](expected<std::vector<tensor>> y) {
          if (y && (*y)[0].to_vector<float>() == std::vector<float>{2 * v, -2 * v}) ++right;
          ++answered;
        });
        if (i % 8 == 7) std::this_thread::sleep_for(200us);  // a steady stream rather than one burst
      }
    });
  for (auto& c : callers) c.join();
  while (answered.load() < threads * per_thread) std::this_thread::sleep_for(1ms);
  CHECK(right.load() == threads * per_thread);
  const auto s = q->stats();
  CHECK(s.requests == threads * per_thread);
  // The first request of an idle batcher and each request that fills a batch send a message; the
  // rest wait for the batcher's timer or its replica's answer.
  CHECK(s.wakeups >= 1);
  CHECK(s.wakeups <= s.batches + 1);
  CHECK(s.wakeups < s.requests / 4);

  // Refused before it is queued: answered before predict_async returns, on this thread.
  const auto caller = std::this_thread::get_id();
  std::optional<expected<std::vector<tensor>>> bad;
  std::thread::id answered_on;
  q->predict_async({tensor::from_vector<float>({1, 2, 3}, {1, 3})}, std::nullopt, [&](expected<std::vector<tensor>> y) {
    bad = std::move(y);
    answered_on = std::this_thread::get_id();
  });
  REQUIRE(bad.has_value());
  CHECK(answered_on == caller);
  REQUIRE_FALSE(*bad);
  CHECK(bad->error_value().code == errc::invalid_argument);
  CHECK(bad->error_value().message.find("input 'x'") != std::string::npos);
}

TEST_CASE("a batch is padded to the next allowed size and the padding never reaches a caller", "[batching]") {
  runtime rt{{.scheduler_threads = 2}};
  auto model = std::make_shared<doubling_model>();
  auto q = batching_queue::start(rt, [model](const std::vector<tensor>& in) { return (*model)(in); },
                                 {.max_batch_size = 8, .batch_timeout = 100ms, .allowed_batch_sizes = {4, 8}}, one_input);
  REQUIRE(q);
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::vector<float>> answers;
  for (int i = 0; i < 3; ++i)
    q->predict_async({row(static_cast<float>(i), 1)}, std::nullopt, [&](expected<std::vector<tensor>> y) {
      std::lock_guard<std::mutex> guard{mtx};
      answers.push_back(y ? (*y)[0].to_vector<float>() : std::vector<float>{});
      cv.notify_all();
    });
  std::unique_lock<std::mutex> lock{mtx};
  REQUIRE(cv.wait_for(lock, 10s, [&] { return answers.size() == 3; }));
  for (const auto& a : answers) CHECK(a.size() == 2);
  const auto s = q->stats();
  CHECK(s.batches == 1);
  CHECK(s.padded_rows == 1);
  std::lock_guard<std::mutex> guard{model->mtx};
  CHECK(model->batch_rows == std::vector<int64_t>{4});
}

TEST_CASE("a lone request waits for the batch timeout, not for company", "[batching][timing]") {
  runtime rt{{.scheduler_threads = 2}};
  auto model = std::make_shared<doubling_model>();
  auto q = batching_queue::start(rt, [model](const std::vector<tensor>& in) { return (*model)(in); },
                                 {.max_batch_size = 32, .batch_timeout = 20ms}, one_input);
  REQUIRE(q);
  const auto start = clock_type::now();
  auto y = q->predict({row(1, 2)});
  const auto waited = clock_type::now() - start;
  REQUIRE(y);
  CHECK(waited >= 15ms);
  CHECK(waited < 5s);
}

TEST_CASE("a full queue is refused at once, a deadline that passed is refused without running", "[batching][timing]") {
  runtime rt{{.scheduler_threads = 2}};
  auto g = std::make_shared<gate>();
  auto model = std::make_shared<doubling_model>();
  auto q = batching_queue::start(rt,
                                 [g, model](const std::vector<tensor>& in) {
                                   g->wait();
                                   return (*model)(in);
                                 },
                                 {.max_batch_size = 2, .batch_timeout = 0ms, .max_enqueued_batches = 1}, one_input);
  REQUIRE(q);
  std::atomic<int> answered{0}, timed_out{0};
  auto count = [&](expected<std::vector<tensor>> y) {
    if (!y && y.error_value().code == errc::timeout) ++timed_out;
    ++answered;
  };
  q->predict_async({row(1, 1)}, std::nullopt, count);  // runs, and blocks the only replica
  g->wait_entered(1);
  q->predict_async({row(2, 2)}, clock_type::now() + 5ms, count);  // waits; its deadline passes
  q->predict_async({row(3, 3)}, std::nullopt, count);              // waits: the queue is now full
  while (q->queued_rows() < 2) std::this_thread::sleep_for(1ms);

  const auto start = clock_type::now();
  auto refused = q->predict({row(4, 4)});
  CHECK(clock_type::now() - start < 1s);
  REQUIRE_FALSE(refused);
  CHECK(refused.error_value().code == errc::resource_exhausted);
  CHECK(refused.error_value().message.find("queue is full") != std::string::npos);
  auto late = q->predict({row(5, 5)}, clock_type::now() - 1ms);
  REQUIRE_FALSE(late);
  CHECK(late.error_value().code == errc::timeout);

  std::this_thread::sleep_for(10ms);
  g->release();
  while (answered.load() < 3) std::this_thread::sleep_for(1ms);
  CHECK(timed_out.load() == 1);
  const auto s = q->stats();
  CHECK(s.refused_full == 1);
  CHECK(s.refused_deadline == 2);
  CHECK(s.rows == 2);  // the rows of requests 1 and 3 only
}

TEST_CASE("a full batch waits in a busy replica's mailbox, counted as enqueued, unless a deadline forbids", "[batching]") {
  runtime rt{{.scheduler_threads = 2}};
  auto g = std::make_shared<gate>();
  auto model = std::make_shared<doubling_model>();
  model->work = 50ms;  // what the batcher learns a batch takes
  auto held = std::make_shared<std::atomic<bool>>(false);
  auto q = batching_queue::start(rt,
                                 [g, model, held](const std::vector<tensor>& in) {
                                   if (held->load()) g->wait();
                                   return (*model)(in);
                                 },
                                 {.max_batch_size = 2, .batch_timeout = 0ms, .max_enqueued_batches = 2}, one_input);
  REQUIRE(q);
  REQUIRE(q->predict({row(0, 0)}));  // one batch run, so that its time is known
  *held = true;
  std::mutex mtx;
  std::map<int, expected<std::vector<tensor>>> answers;
  auto keep = [&](int id) {
    return [&, id](expected<std::vector<tensor>> y) {
      std::lock_guard<std::mutex> guard{mtx};
      answers.emplace(id, std::move(y));
    };
  };
  const tensor two_rows = tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  q->predict_async({row(1, 1)}, std::nullopt, keep(1));  // runs, and holds the only replica
  g->wait_entered(1);
  // A full batch that would end after its deadline (the running batch, then its own: ~100 ms) is
  // refused without running; one with time to spare goes to the replica's mailbox.
  q->predict_async({two_rows}, clock_type::now() + 60ms, keep(2));
  q->predict_async({two_rows}, clock_type::now() + 10s, keep(3));
  for (int i = 0; i < 2000 && q->stats().sent_ahead < 1; ++i) std::this_thread::sleep_for(1ms);
  CHECK(q->stats().sent_ahead == 1);
  CHECK(q->stats().refused_deadline == 1);
  CHECK(q->queued_rows() == 2);  // the batch in the mailbox is still enqueued
  // A partial batch stays with the batcher; the next full one finds no room (one waits already).
  q->predict_async({row(4, 4)}, std::nullopt, keep(4));
  q->predict_async({row(5, 5)}, std::nullopt, keep(5));
  for (int i = 0; i < 2000 && q->queued_rows() < 4; ++i) std::this_thread::sleep_for(1ms);
  CHECK(q->queued_rows() == 4);
  CHECK(q->stats().sent_ahead == 1);
  auto refused = q->predict({row(6, 6)});
  REQUIRE_FALSE(refused);
  CHECK(refused.error_value().code == errc::resource_exhausted);

  g->release();
  for (int i = 0; i < 5000; ++i) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (answers.size() == 5) break;
    }
    std::this_thread::sleep_for(1ms);
  }
  std::lock_guard<std::mutex> guard{mtx};
  REQUIRE(answers.size() == 5);
  CHECK(answers.at(2).error_value().code == errc::timeout);
  CHECK(answers.at(3).value().front().to_vector<float>() == std::vector<float>{2, 4, 6, 8});
  CHECK(answers.at(1).value().front().to_vector<float>() == std::vector<float>{2, 2});
  CHECK(answers.at(4).value().front().to_vector<float>() == std::vector<float>{8, 8});
  CHECK(answers.at(5).value().front().to_vector<float>() == std::vector<float>{10, 10});
  std::lock_guard<std::mutex> rows_guard{model->mtx};
  CHECK(model->batch_rows == std::vector<int64_t>{1, 1, 2, 2});  // warm-up, 1, 3, then 4 and 5 joined
}

TEST_CASE("without batching a request of any size runs alone, even one larger than the queue", "[batching]") {
  runtime rt{{.scheduler_threads = 2}};
  auto q = batching_queue::start(rt, [](const std::vector<tensor>& in) -> expected<std::vector<tensor>> { return in; },
                                 {.max_batch_size = 4, .batch_timeout = 0ms, .max_enqueued_batches = 2, .join_requests = false},
                                 one_input);
  REQUIRE(q);
  REQUIRE(q->capacity_rows() == 8);
  auto big = tensor::zeros({33, 2}, dtype::f32).value();
  auto y = q->predict({big});
  REQUIRE(y);
  CHECK((*y)[0].dim(0) == 33);
  const auto stats = q->stats();
  CHECK(stats.batches == 1);
  CHECK(stats.rows == 33);
  CHECK(stats.batch_sizes.back() == 1);  // counted in the last bucket: "max_batch_size or more"
}

TEST_CASE("a model that throws fails its batch as internal, and its replica runs the next one", "[batching]") {
  runtime rt{{.scheduler_threads = 2}};
  std::atomic<int> calls{0};
  auto q = batching_queue::start(
      rt,
      [&calls](const std::vector<tensor>& in) -> expected<std::vector<tensor>> {
        switch (calls++) {
          case 0: throw std::runtime_error("bad weights");
          case 1: throw 42;  // not a std::exception
          default: return in;
        }
      },
      {.max_batch_size = 4, .batch_timeout = 0ms, .num_batch_threads = 1}, one_input);
  REQUIRE(q);
  auto first = q->predict({row(1, 1)});
  REQUIRE_FALSE(first);
  CHECK(first.error_value().code == errc::internal);
  CHECK_THAT(first.error_value().message, Catch::Contains("bad weights"));
  auto second = q->predict({row(1, 1)});
  REQUIRE_FALSE(second);
  CHECK(second.error_value().code == errc::internal);
  auto third = q->predict({row(2, 3)});
  REQUIRE(third);
  CHECK((*third)[0].to_vector<float>() == std::vector<float>{2, 3});
}

TEST_CASE("bad requests and a failing model are named, and shutting down answers what waits", "[batching]") {
  runtime rt{{.scheduler_threads = 2}};
  auto failing = batching_queue::start(
      rt, [](const std::vector<tensor>&) -> expected<std::vector<tensor>> { return make_error(errc::out_of_range, "class id 7"); },
      {.max_batch_size = 4, .batch_timeout = 0ms}, one_input);
  REQUIRE(failing);
  auto failed = failing->predict({row(1, 1)});
  REQUIRE_FALSE(failed);
  CHECK(failed.error_value().message == "class id 7");
  for (auto [inputs, message] : std::vector<std::pair<std::vector<tensor>, std::string>>{
           {{tensor::from_vector<int64_t>({1, 2}, {1, 2})}, "input 'x' must be f32[-1,2], got i64[1,2]"},
           {{tensor::from_vector<float>({1, 2, 3}, {1, 3})}, "input 'x' must be f32[-1,2], got f32[1,3]"},
           {{tensor::zeros({5, 2}, dtype::f32).value()}, "5 rows exceed max_batch_size 4"},
           {{row(1, 1), row(1, 1)}, "the signature takes 1 inputs, the request has 2"}}) {
    auto r = failing->predict(inputs);
    REQUIRE_FALSE(r);
    CHECK(r.error_value().code == errc::invalid_argument);
    CHECK(r.error_value().message == message);
  }
  CHECK_FALSE(batching_queue::start(rt, {}, {.max_batch_size = 4, .allowed_batch_sizes = {2, 3}}, one_input));

  auto g = std::make_shared<gate>();
  std::atomic<int> cancelled{0}, answered{0};
  {
    auto q = batching_queue::start(rt,
                                   [g](const std::vector<tensor>& in) -> expected<std::vector<tensor>> {
                                     g->wait();
                                     return in;
                                   },
                                   {.max_batch_size = 1, .batch_timeout = 0ms}, one_input);
    REQUIRE(q);
    for (int i = 0; i < 3; ++i)
      q->predict_async({row(1, 1)}, std::nullopt, [&](expected<std::vector<tensor>> y) {
        if (!y && y.error_value().code == errc::cancelled) ++cancelled;
        ++answered;
      });
    g->wait_entered(1);
    while (q->queued_rows() < 2) std::this_thread::sleep_for(1ms);
    std::thread opener{[g] {
      std::this_thread::sleep_for(20ms);
      g->release();
    }};
    q = batching_queue::start(rt, {}, {}, one_input);  // the old queue shuts down: waits for its replica
    opener.join();
  }
  // Every request is answered, once, and as cancelled: the one running when its queue shut down
  // and the two waiting behind it.
  REQUIRE(testing::eventually([&] { return answered.load() == 3; }, 30s));
  std::this_thread::sleep_for(20ms);  // an answer given twice would land by now
  CHECK(answered.load() == 3);
  CHECK(cancelled.load() == 3);
}

TEST_CASE("with joining off every request runs as its own batch, unpadded", "[batching][timing]") {
  runtime rt{{.scheduler_threads = 2}};
  auto model = std::make_shared<doubling_model>();
  batching_options o;
  o.max_batch_size = 8;
  o.batch_timeout = 100ms;  // would hold a lone request back if joining were on
  o.allowed_batch_sizes = {4, 8};
  o.join_requests = false;
  auto q = batching_queue::start(rt, [model](const std::vector<tensor>& in) { return (*model)(in); }, o, one_input);
  REQUIRE(q);
  const auto started = clock_type::now();
  for (int i = 0; i < 5; ++i) REQUIRE(q->predict({row(static_cast<float>(i), 0)}));
  CHECK(clock_type::now() - started < 100ms);
  std::lock_guard<std::mutex> guard{model->mtx};
  CHECK(model->batch_rows == std::vector<int64_t>(5, 1));
}

TEST_CASE("replica_nice lowers the priority of the replicas' threads only", "[batching]") {
  const int before = getpriority(PRIO_PROCESS, 0);
  if (before > 7) AF_SKIP("this process already runs at niceness " << before);
  runtime rt{{.scheduler_threads = 2}};
  std::atomic<int> seen{-100};
  batching_options o;
  o.max_batch_size = 4;
  o.batch_timeout = 1ms;
  o.replica_nice = 7;
  auto q = batching_queue::start(rt, [&seen](const std::vector<tensor>& in) {
    seen = getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
    return expected<std::vector<tensor>>{std::vector<tensor>{in[0]}};
  }, o, one_input);
  REQUIRE(q);
  REQUIRE(q->predict({row(1, 2)}));
  CHECK(seen.load() == 7);
  CHECK(getpriority(PRIO_PROCESS, 0) == before);  // the caller's thread, and the process, keep theirs
}

TEST_CASE("requests of different lengths share a batch only when padding is on", "[batching]") {
  const std::vector<graph::tensor_spec> sequence{{"x", graph::value_type{dtype::f32, {-1, -1}}}};
  auto short_row = tensor::from_vector<float>({1, 2}, {1, 2});
  auto long_row = tensor::from_vector<float>({3, 4, 5}, {1, 3});
  for (const bool pad : {false, true}) {
    runtime rt{{.scheduler_threads = 2}};
    auto model = std::make_shared<doubling_model>();
    gate g;
    batching_options o;
    o.max_batch_size = 4;
    o.batch_timeout = 1ms;
    o.pad_variable_length_inputs = pad;
    auto q = batching_queue::start(rt, [model, &g](const std::vector<tensor>& in) {
      g.wait();
      return (*model)(in);
    }, o, sequence);
    REQUIRE(q);
    // A first batch occupies the replica while the short and the long request queue behind it.
    std::vector<std::optional<expected<std::vector<tensor>>>> answers(3);
    std::mutex mtx;
    std::condition_variable cv;
    auto ask = [&](int i, tensor t) {
      q->predict_async({std::move(t)}, std::nullopt, [&, i](expected<std::vector<tensor>> y) {
        std::lock_guard<std::mutex> guard{mtx};
        answers[i] = std::move(y);
        cv.notify_all();
      });
    };
    ask(0, short_row);
    g.wait_entered(1);
    ask(1, short_row);
    ask(2, long_row);
    std::this_thread::sleep_for(20ms);
    g.release();
    std::unique_lock<std::mutex> lock{mtx};
    REQUIRE(cv.wait_for(lock, 10s, [&] { return answers[0] && answers[1] && answers[2]; }));
    REQUIRE(*answers[2]);
    REQUIRE(*answers[1]);
    INFO("pad_variable_length_inputs = " << pad);
    std::lock_guard<std::mutex> guard{model->mtx};
    if (pad) {
      // One batch of both, the short one padded with a zero: its answer has the batch's width.
      CHECK(model->batch_rows == std::vector<int64_t>{1, 2});
      CHECK((**answers[1])[0].to_vector<float>() == std::vector<float>{2, 4, 0});
      CHECK((**answers[2])[0].to_vector<float>() == std::vector<float>{6, 8, 10});
    } else {
      CHECK(model->batch_rows == std::vector<int64_t>{1, 1, 1});
      CHECK((**answers[1])[0].to_vector<float>() == std::vector<float>{2, 4});
      CHECK((**answers[2])[0].to_vector<float>() == std::vector<float>{6, 8, 10});
    }
  }
}
