#include "ops/runtime/executor.hpp"

#include <atomic>
#include <mutex>
#include <utility>

namespace af {

namespace {

thread_local backend* running_device = nullptr;

struct installed_request {
  uint64_t id;
  std::shared_ptr<const graph_request> request;
};

std::mutex installed_mtx;
std::vector<installed_request>& installed() {
  static std::vector<installed_request> requests;
  return requests;
}
std::atomic<uint64_t> next_installation{1};

std::atomic<uint64_t> in_device_actor_count{0}, requested_count{0}, without_runtime_count{0};

std::shared_ptr<const graph_request> newest_request() {
  std::lock_guard<std::mutex> guard{installed_mtx};
  return installed().empty() ? nullptr : installed().back().request;
}

}  // namespace

namespace detail {
// graph::interpret's count of runs on threads outside any device actor (interpreter.cpp).
extern std::atomic<uint64_t> interpreted_outside_device_actor;
}  // namespace detail

device_actor_scope::device_actor_scope(backend& device) noexcept : previous_(std::exchange(running_device, &device)) {}

device_actor_scope::~device_actor_scope() { running_device = previous_; }

backend* current_device_actor() noexcept { return running_device; }

graph_request_installation::graph_request_installation(graph_request request)
    : id_(next_installation.fetch_add(1, std::memory_order_relaxed)) {
  std::lock_guard<std::mutex> guard{installed_mtx};
  installed().push_back({id_, std::make_shared<const graph_request>(std::move(request))});
}

graph_request_installation::~graph_request_installation() {
  std::lock_guard<std::mutex> guard{installed_mtx};
  std::erase_if(installed(), [this](const installed_request& r) { return r.id == id_; });
}

expected<std::vector<tensor>> execute(const graph::graph& g, const std::vector<tensor>& parameters,
                                      const graph::output_ready& on_output) {
  if (backend* device = running_device) {
    in_device_actor_count.fetch_add(1, std::memory_order_relaxed);
    return graph::interpret(g, parameters, *device, on_output);
  }
  if (auto request = newest_request()) {
    requested_count.fetch_add(1, std::memory_order_relaxed);
    return (*request)(g, parameters, on_output);
  }
  without_runtime_count.fetch_add(1, std::memory_order_relaxed);
  return graph::interpret(g, parameters, default_cpu_backend(), on_output);
}

executor_counts executor_statistics() noexcept {
  return {in_device_actor_count.load(std::memory_order_relaxed), requested_count.load(std::memory_order_relaxed),
          without_runtime_count.load(std::memory_order_relaxed),
          detail::interpreted_outside_device_actor.load(std::memory_order_relaxed)};
}

}  // namespace af
