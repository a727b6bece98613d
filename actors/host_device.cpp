// The host device actor: one graph per message, run inside a device_actor_scope of its backend.
// A request is a ticket owned by the message alone, so a message the actor never handles (it
// stopped first) still answers its caller when CAF drops it.

#include "actors/host_device.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "actors/resume_ordered.hpp"
#include "actors/tracing.hpp"
#include "ops/allocator.hpp"
#include "ops/parallel.hpp"
#include "ops/runtime/executor.hpp"

namespace af {

namespace {

using run_graph_atom = caf::atom_constant<caf::atom("af_rungrph")>;

// Lives on the requesting thread's stack until `done`.
struct graph_call {
  const graph::graph* g = nullptr;
  const std::vector<tensor>* parameters = nullptr;
  const graph::output_ready* on_output = nullptr;
  std::shared_ptr<allocator> memory;  // the caller's allocator scope, if any
  int thread_share = 0;               // the caller's thread share, if any

  std::mutex mtx;
  std::condition_variable finished;
  bool done = false;
  std::optional<expected<std::vector<tensor>>> result;

  void complete(expected<std::vector<tensor>> r) {
    std::lock_guard<std::mutex> guard{mtx};
    if (done) return;
    result.emplace(std::move(r));
    done = true;
    finished.notify_one();
  }
};

// Whoever answers takes the call out as it answers: once answered, the caller's stack frame may be gone.
struct graph_ticket {
  graph_call* call;
  ~graph_ticket() {
    if (call) call->complete(make_error(errc::cancelled, "the runtime's device actor stopped before running the graph"));
  }
};

}  // namespace

}  // namespace af

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<af::graph_ticket>)

namespace af {

namespace {

struct host_device_state {
  std::shared_ptr<backend> device;
  std::unique_ptr<trace::activity> act;
};

using host_device_actor = detail::resume_ordered<caf::stateful_actor<host_device_state>>;

caf::behavior host_device_behavior(host_device_actor* self, std::shared_ptr<backend> device) {
  self->state.act = std::make_unique<trace::activity>(device->properties().name);
  self->state.device = std::move(device);
  return {[self](run_graph_atom, const std::shared_ptr<graph_ticket>& ticket) {
    auto& s = self->state;
    // The ticket keeps the call until it is answered: if anything here throws, the message's
    // destruction still answers the caller.
    graph_call& call = *ticket->call;
    const int64_t start = trace::now_ns();
    static const trace::name_id graph_name = trace::intern("graph");
    std::optional<allocator_scope> memory;
    if (call.memory) memory.emplace(call.memory);
    std::optional<scoped_thread_share> share;
    if (call.thread_share > 0) share.emplace(call.thread_share);
    auto result = guarded("the graph", [&] {
      device_actor_scope on{*s.device};
      return execute(*call.g, *call.parameters, *call.on_output);
    });
    s.act->busy_since(start, graph_name, 1);
    std::exchange(ticket->call, nullptr)->complete(std::move(result));
  }};
}

}  // namespace

// One lane per core: callers on several threads run their graphs at once, as they would on their
// own threads, and a caller takes the lane with the fewest calls waiting.
struct lanes {
  std::vector<caf::actor> actors;
  std::unique_ptr<std::atomic<int>[]> waiting;

  std::size_t least_busy() const {
    std::size_t best = 0;
    for (std::size_t i = 1; i < actors.size(); ++i)
      if (waiting[i].load(std::memory_order_relaxed) < waiting[best].load(std::memory_order_relaxed)) best = i;
    return best;
  }
};

struct host_device::impl {
  std::shared_ptr<lanes> pool;
  std::optional<graph_request_installation> installation;
};

host_device::host_device(caf::actor_system& sys, std::shared_ptr<backend> device, int lane_count)
    : impl_(std::make_unique<impl>()) {
  auto pool = std::make_shared<lanes>();
  lane_count = std::max(1, lane_count);
  pool->waiting = std::make_unique<std::atomic<int>[]>(static_cast<std::size_t>(lane_count));
  for (int i = 0; i < lane_count; ++i) pool->actors.push_back(sys.spawn<caf::detached>(host_device_behavior, device));
  impl_->pool = pool;
  impl_->installation.emplace([pool](const graph::graph& g, const std::vector<tensor>& parameters,
                                     const graph::output_ready& on_output) -> expected<std::vector<tensor>> {
    graph_call call;
    call.g = &g;
    call.parameters = &parameters;
    call.on_output = &on_output;
    call.memory = scoped_cpu_allocator();
    call.thread_share = thread_share_cap();
    const std::size_t lane = pool->least_busy();
    struct counted {
      std::atomic<int>& waiting;
      explicit counted(std::atomic<int>& w) : waiting(w) { waiting.fetch_add(1, std::memory_order_relaxed); }
      ~counted() { waiting.fetch_sub(1, std::memory_order_relaxed); }
    } queued{pool->waiting[lane]};
    caf::anon_send(pool->actors[lane], run_graph_atom::value, std::shared_ptr<graph_ticket>(new graph_ticket{&call}));
    std::unique_lock<std::mutex> lock{call.mtx};
    call.finished.wait(lock, [&] { return call.done; });
    return std::move(*call.result);
  });
}

host_device::~host_device() {
  impl_->installation.reset();
  for (const auto& actor : impl_->pool->actors) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}

}  // namespace af
