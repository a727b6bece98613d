#include "actors/runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include "actors/caf_error.hpp"
#include "actors/host_device.hpp"
#include "actors/message_types.hpp"
#include "ops/parallel.hpp"
#include "ops/runtime/backend.hpp"

namespace af {

namespace {

class actorflow_config : public caf::actor_system_config {
 public:
  explicit actorflow_config(const runtime_options& options) {
    configure_actor_system(*this);
    if (options.eager_stealing) {
      set("work-stealing.moderate-steal-interval", size_t{1});
      set("work-stealing.moderate-sleep-duration", caf::timespan{std::chrono::microseconds{10}});
      set("work-stealing.moderate-poll-attempts", static_cast<size_t>(std::max(1, options.idle_polls)));
    }
    if (!options.caf_args.empty()) parse(options.caf_args);
    const int threads = options.scheduler_threads > 0
                            ? options.scheduler_threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    set("scheduler.max-threads", static_cast<size_t>(threads));
    if (options.deterministic) set("scheduler.policy", caf::atom("testing"));
    if (options.network) {
      load<caf::io::middleman>();
#if defined(__SANITIZE_THREAD__)
      // CAF hands each incoming payload buffer to a pool of BASP workers through uninstrumented
      // queues; TSan then sees every deserialised byte as a race (suppressed, but minutes per 4 MiB
      // tensor). Deserialising on the multiplexer thread that received the bytes avoids that edge.
      set("middleman.workers", size_t{0});
#endif
      if (options.heartbeat_interval_ms > 0)
        set("middleman.heartbeat-interval",
            caf::timespan{std::chrono::milliseconds{options.heartbeat_interval_ms}});
      if (options.connection_timeout_ms > 0)
        set("middleman.connection-timeout",
            caf::timespan{std::chrono::milliseconds{options.connection_timeout_ms}});
    }
  }
};

}  // namespace

void configure_actor_system(caf::actor_system_config& cfg) {
  register_error_category(cfg);
  cfg.add_message_type<tensor>("af.tensor");
  cfg.add_message_type<std::vector<tensor>>("af.tensors");
  cfg.add_message_type<named_tensor>("af.named_tensor");
  cfg.add_message_type<std::vector<named_tensor>>("af.named_tensors");
  cfg.add_message_type<element>("af.element");
  cfg.add_message_type<std::vector<element>>("af.elements");
  // The flow protocol (actors/flow_protocol.hpp) needs no more: its messages are atoms, uint64_t,
  // caf::error and the element batches above. The device actor's types are registered where their
  // inspect() lives (declared here so that this file needs no CAF-heavy include).
  void register_device_message_types(caf::actor_system_config&);
  register_device_message_types(cfg);
}

struct runtime::impl {
  runtime_options options;
  actorflow_config config;
  caf::actor_system system;
  std::shared_ptr<backend> cpu = make_cpu_backend({.name = "cpu:0"});
  // Destroyed before the system: af::execute stops asking it, then it stops.
  host_device graphs{system, cpu, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};

  explicit impl(runtime_options opts)
      : options(std::move(opts)), config(options), system(config) {}
};

runtime::runtime(runtime_options options) {
  if (options.kernel_threads > 0) set_thread_budget(options.kernel_threads);
  impl_ = std::make_unique<impl>(std::move(options));
}

runtime::~runtime() = default;

caf::actor_system& runtime::system() noexcept { return impl_->system; }

const runtime_options& runtime::options() const noexcept { return impl_->options; }

const std::shared_ptr<backend>& runtime::cpu_device() const noexcept { return impl_->cpu; }

}  // namespace af
