#include "actors/tracing.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace af::trace {

namespace {

struct raw_span {
  name_id name;
  name_id actor;
  category cat;
  uint32_t items;
  int64_t start_ns;
  int64_t end_ns;
};

// One per recording thread. The mutex is taken by its own thread on every append and by the
// collector; the owner therefore never waits on another recorder.
struct thread_buffer {
  std::mutex mtx;
  std::vector<raw_span> spans;
  std::size_t dropped = 0;
  uint32_t tid = 0;
};

struct registry {
  std::mutex mtx;
  std::vector<std::shared_ptr<thread_buffer>> buffers;  // kept after their thread exits
  std::vector<std::string> names;
  std::unordered_map<std::string, name_id> ids;
  std::atomic<std::size_t> capacity{std::size_t{1} << 16};
  std::atomic<bool> on{false};
};

registry& reg() {
  static registry* r = new registry;  // never destroyed: threads may record during static teardown
  return *r;
}

thread_buffer& local_buffer() {
  thread_local std::shared_ptr<thread_buffer> mine = [] {
    auto buf = std::make_shared<thread_buffer>();
    auto& r = reg();
    std::lock_guard<std::mutex> guard{r.mtx};
    buf->tid = static_cast<uint32_t>(r.buffers.size() + 1);
    r.buffers.push_back(buf);
    return buf;
  }();
  return *mine;
}

}  // namespace

const char* to_string(category c) noexcept {
  switch (c) {
    case category::busy: return "busy";
    case category::waiting_for_input: return "waiting_for_input";
    case category::blocked_on_output: return "blocked_on_output";
  }
  return "busy";
}

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

name_id intern(std::string_view name) {
  auto& r = reg();
  std::lock_guard<std::mutex> guard{r.mtx};
  auto it = r.ids.find(std::string{name});
  if (it != r.ids.end()) return it->second;
  auto id = static_cast<name_id>(r.names.size());
  r.names.emplace_back(name);
  r.ids.emplace(std::string{name}, id);
  return id;
}

bool enabled() noexcept { return reg().on.load(std::memory_order_relaxed); }

void start() {
  clear();
  reg().on.store(true, std::memory_order_relaxed);
}

void stop() { reg().on.store(false, std::memory_order_relaxed); }

void clear() {
  auto& r = reg();
  std::lock_guard<std::mutex> guard{r.mtx};
  for (auto& buf : r.buffers) {
    std::lock_guard<std::mutex> buf_guard{buf->mtx};
    buf->spans.clear();
    buf->dropped = 0;
  }
}

void set_per_thread_capacity(std::size_t spans) { reg().capacity.store(spans); }

void record(name_id name, name_id actor, category cat, int64_t start_ns, int64_t end_ns,
            uint32_t items) noexcept {
  if (!enabled()) return;
  auto& buf = local_buffer();
  const std::size_t cap = reg().capacity.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard{buf.mtx};
  if (buf.spans.size() >= cap) {
    ++buf.dropped;
    return;
  }
  if (buf.spans.capacity() == 0) buf.spans.reserve(std::min<std::size_t>(cap, 4096));
  buf.spans.push_back({name, actor, cat, items, start_ns, end_ns});
}

std::vector<span> collect() {
  auto& r = reg();
  std::lock_guard<std::mutex> guard{r.mtx};
  std::vector<span> out;
  for (auto& buf : r.buffers) {
    std::lock_guard<std::mutex> buf_guard{buf->mtx};
    for (const auto& s : buf->spans)
      out.push_back({r.names[s.name], r.names[s.actor], s.cat, s.start_ns, s.end_ns, buf->tid,
                     s.items});
  }
  std::sort(out.begin(), out.end(),
            [](const span& a, const span& b) { return a.start_ns < b.start_ns; });
  return out;
}

std::size_t dropped() {
  auto& r = reg();
  std::lock_guard<std::mutex> guard{r.mtx};
  std::size_t n = 0;
  for (auto& buf : r.buffers) {
    std::lock_guard<std::mutex> buf_guard{buf->mtx};
    n += buf->dropped;
  }
  return n;
}

std::string to_chrome_json(const std::vector<span>& spans) {
  int64_t origin = spans.empty() ? 0 : spans.front().start_ns;
  for (const auto& s : spans) origin = std::min(origin, s.start_ns);
  nlohmann::json events = nlohmann::json::array();
  for (const auto& s : spans) {
    events.push_back({{"name", s.actor + ": " + s.name},
                      {"cat", to_string(s.cat)},
                      {"ph", "X"},
                      {"ts", static_cast<double>(s.start_ns - origin) / 1000.0},
                      {"dur", static_cast<double>(s.end_ns - s.start_ns) / 1000.0},
                      {"pid", 1},
                      {"tid", s.tid},
                      {"args", {{"stage", s.actor}, {"span", s.name}, {"items", s.items}}}});
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

expected<void> write_chrome_trace(const std::string& path, const std::vector<span>& spans) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  if (!out) return make_error(errc::io_error, "trace: cannot open " + path + " for writing");
  out << to_chrome_json(spans);
  out.close();
  if (!out) return make_error(errc::io_error, "trace: writing " + path + " failed");
  return {};
}

report summarize(const std::vector<span>& spans) {
  struct acc {
    int64_t first = INT64_MAX, last = INT64_MIN, ns[3] = {0, 0, 0};
    uint64_t items = 0;
  };
  std::map<std::string, acc> per_actor;
  for (const auto& s : spans) {
    auto& a = per_actor[s.actor];
    a.first = std::min(a.first, s.start_ns);
    a.last = std::max(a.last, s.end_ns);
    a.ns[static_cast<int>(s.cat)] += s.end_ns - s.start_ns;
    a.items += s.items;
  }
  report out;
  double worst = -1;
  for (const auto& [name, a] : per_actor) {
    actor_summary sum;
    sum.actor = name;
    sum.window_ns = std::max<int64_t>(1, a.last - a.first);
    const double w = static_cast<double>(sum.window_ns);
    sum.busy = static_cast<double>(a.ns[0]) / w;
    sum.waiting = static_cast<double>(a.ns[1]) / w;
    sum.blocked = static_cast<double>(a.ns[2]) / w;
    sum.items = a.items;
    sum.items_per_second = static_cast<double>(a.items) * 1e9 / w;
    if (sum.busy > worst) {
      worst = sum.busy;
      out.bottleneck = name;
    }
    out.actors.push_back(std::move(sum));
  }
  return out;
}

std::string report::to_string() const {
  std::string out;
  char line[256];
  const actor_summary* most_waiting = nullptr;
  for (const auto& a : actors) {
    std::snprintf(line, sizeof line, "%-20s busy %5.1f%%  waiting %5.1f%%  blocked %5.1f%%  %10.1f items/s\n",
                  a.actor.c_str(), a.busy * 100, a.waiting * 100, a.blocked * 100, a.items_per_second);
    out += line;
    if (a.actor != bottleneck && (!most_waiting || a.waiting > most_waiting->waiting)) most_waiting = &a;
  }
  if (bottleneck.empty()) return out + "no spans recorded\n";
  for (const auto& a : actors)
    if (a.actor == bottleneck) {
      std::snprintf(line, sizeof line, "bottleneck: '%s' (busy %.0f%%)", a.actor.c_str(), a.busy * 100);
      out += line;
    }
  if (most_waiting && most_waiting->waiting > 0) {
    std::snprintf(line, sizeof line, "; '%s' waited %.0f%% for input", most_waiting->actor.c_str(),
                  most_waiting->waiting * 100);
    out += line;
  }
  return out + "\n";
}

activity::activity(std::string_view actor) : actor_(intern(actor)) {}

void activity::enter(category cat, name_id what) noexcept {
  const int64_t now = now_ns();
  if (open_) {
    if (cat == cat_ && what == what_) return;  // still doing the same thing: one longer span
    totals_[static_cast<int>(cat_)] += now - since_;
    record(what_, actor_, cat_, since_, now);
  }
  open_ = true;
  cat_ = cat;
  what_ = what;
  since_ = now;
}

void activity::leave(uint32_t items) noexcept {
  if (!open_) return;
  const int64_t now = now_ns();
  totals_[static_cast<int>(cat_)] += now - since_;
  record(what_, actor_, cat_, since_, now, items);
  open_ = false;
}

void activity::busy_since(int64_t start_ns, name_id what, uint32_t items) noexcept {
  leave();
  const int64_t now = now_ns();
  totals_[static_cast<int>(category::busy)] += now - start_ns;
  record(what, actor_, category::busy, start_ns, now, items);
}

}  // namespace af::trace
