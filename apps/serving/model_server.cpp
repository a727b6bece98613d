// The model manager: version directories scanned, loaded, warmed up, routed to, drained, unloaded.

#include "apps/serving/model_server.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include "apps/serving/metrics.hpp"
#include "apps/serving/warmup.hpp"
#include "serialization/saved_model.hpp"

namespace af::serving {

namespace fs = std::filesystem;

namespace {

// A loaded version: its model and one batching queue per signature. Requests count themselves in
// `in_flight` (shared, so that an answer arriving after the version left the routing table still
// has somewhere to count down); the manager destroys a version only once that is zero, on its own
// thread, never on the actor thread that delivered an answer.
struct signature_queue {
  std::shared_ptr<const graph::signature> signature;  // shared with the answers
  batching_queue queue;
  serving_metrics::latency_histogram* answered = nullptr;  // its "OK" series, when there are metrics
  serving_metrics::latency_histogram* refused = nullptr;   // its "resource_exhausted" series, likewise
};

struct servable {
  std::string model_name;
  int64_t version = 0;
  std::string dir;
  saved_model::loaded_model model;
  std::map<std::string, signature_queue, std::less<>> queues;  // declared after the model: destroyed first
  std::shared_ptr<std::atomic<int64_t>> in_flight = std::make_shared<std::atomic<int64_t>>(0);
};

struct model_entry {
  model_config config;
  std::map<int64_t, std::shared_ptr<servable>> available;
  std::map<int64_t, version_status> statuses;
  // Versions whose load failed, with their directory's fingerprint then: tried again when it changes.
  std::map<int64_t, std::string> failed_fingerprints;
};

// What a version directory looks like now (names, sizes, times of its files): a copy still in
// progress or a replaced version changes it.
std::string fingerprint(const fs::path& dir) {
  std::string out;
  std::error_code ec;
  std::vector<std::string> lines;
  for (fs::recursive_directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    const auto size = it->is_regular_file(e2) ? it->file_size(e2) : 0;
    const auto time = it->last_write_time(e2).time_since_epoch().count();
    lines.push_back(it->path().string() + ":" + std::to_string(size) + ":" + std::to_string(time));
  }
  std::sort(lines.begin(), lines.end());
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// The numbered subdirectories of a base path ("1", "2", ...; others are ignored, as TF Serving does).
std::vector<int64_t> versions_on_disk(const std::string& base) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (fs::directory_iterator it{base, ec}, end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.size() > 18 || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    std::error_code e2;
    if (it->is_directory(e2)) out.push_back(std::stoll(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

struct model_server::impl {
  runtime* rt = nullptr;
  server_options options;
  std::shared_ptr<serving_metrics> metrics;

  mutable std::shared_mutex routing_mtx;  // models' available/statuses
  std::map<std::string, model_entry, std::less<>> models;

  std::mutex scan_mtx;  // one scan at a time (poller or poll_now)
  std::vector<std::shared_ptr<servable>> draining;

  std::mutex stop_mtx;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::thread poller;

  batching_options queue_options() const {
    if (options.enable_batching) return options.batching;
    batching_options o = options.batching;
    o.join_requests = false;
    o.allowed_batch_sizes.clear();
    o.num_batch_threads = std::max<std::size_t>(options.unbatched_threads, 1);
    return o;
  }

  void set_status(model_entry& m, int64_t version, version_state state, error status = {}) {
    std::unique_lock lock{routing_mtx};
    m.statuses[version] = version_status{version, state, std::move(status)};
  }

  // Loads, checks and warms up one version; an error names the directory and what failed.
  expected<std::shared_ptr<servable>> load_version(const model_entry& m, int64_t version) {
    const std::string dir = (fs::path{m.config.base_path} / std::to_string(version)).string();
    AF_TRY_ASSIGN(auto loaded, saved_model::load(dir, {.verify_variables_now = true}));
    auto s = std::make_shared<servable>(servable{m.config.name, version, dir, std::move(loaded), {}});
    const saved_model::loaded_model* model = &s->model;
    for (const auto& sig : s->model.signatures()) {
      auto run = [model, name = sig.name](const std::vector<tensor>& inputs) { return model->call(name, inputs); };
      auto queue = batching_queue::start(*rt, std::move(run), queue_options(), sig.inputs);
      if (!queue) return make_error(queue.error_value().code, s->dir + ": signature '" + sig.name + "': " + queue.error_value().message);
      serving_metrics::latency_histogram* answered = metrics ? &metrics->series(s->model_name, s->version, sig.name, "OK") : nullptr;
      serving_metrics::latency_histogram* refused =
          metrics ? &metrics->series(s->model_name, s->version, sig.name, to_string(errc::resource_exhausted)) : nullptr;
      s->queues.emplace(sig.name, signature_queue{std::make_shared<const graph::signature>(sig), std::move(*queue), answered, refused});
    }
    for (auto& [name, q] : s->queues) {
      auto warmed = warm_up(s->dir, *q.signature, q.queue, queue_options());
      if (!warmed) return make_error(warmed.error_value().code, s->dir + ": warmup of '" + name + "': " + warmed.error_value().message);
    }
    return s;
  }

  // The versions a policy wants among those on disk that have not failed in their current form.
  static std::set<int64_t> wanted(const model_entry& m, const std::vector<int64_t>& on_disk,
                                  const std::map<int64_t, std::string>& fingerprints) {
    std::vector<int64_t> usable;
    for (int64_t v : on_disk) {
      auto failed = m.failed_fingerprints.find(v);
      if (failed == m.failed_fingerprints.end() || failed->second != fingerprints.at(v)) usable.push_back(v);
    }
    std::set<int64_t> out;
    const auto& p = m.config.policy;
    switch (p.choice) {
      case version_policy::kind::all: out.insert(usable.begin(), usable.end()); break;
      case version_policy::kind::specific:
        for (int64_t v : p.specific_versions)
          if (std::find(usable.begin(), usable.end(), v) != usable.end()) out.insert(v);
        break;
      case version_policy::kind::latest:
        for (auto it = usable.rbegin(); it != usable.rend() && out.size() < std::max<uint32_t>(p.latest_count, 1); ++it)
          out.insert(*it);
        break;
    }
    return out;
  }

  void scan_model(model_entry& m) {
    const auto on_disk = versions_on_disk(m.config.base_path);
    std::map<int64_t, std::string> prints;
    for (int64_t v : on_disk) prints[v] = fingerprint(fs::path{m.config.base_path} / std::to_string(v));
    const auto want = wanted(m, on_disk, prints);
    // New versions first: the old ones keep serving until these take traffic (or fail).
    for (int64_t v : want) {
      if (m.available.count(v)) continue;
      set_status(m, v, version_state::loading);
      auto loaded = load_version(m, v);
      if (metrics) metrics->record_load(m.config.name, v, static_cast<bool>(loaded));
      if (!loaded) {
        m.failed_fingerprints[v] = prints[v];
        set_status(m, v, version_state::end, loaded.error_value());
        std::fprintf(stderr, "serving: model '%s' version %lld refused: %s\n", m.config.name.c_str(), static_cast<long long>(v),
                     loaded.error_value().message.c_str());
        continue;
      }
      m.failed_fingerprints.erase(v);
      std::unique_lock lock{routing_mtx};
      m.available[v] = std::move(*loaded);
      m.statuses[v] = version_status{v, version_state::available, {}};
    }
    // Then the versions the policy no longer wants (only if something else is available, for the
    // latest policy, so that a model never goes dark because its newest copy is corrupt).
    std::vector<int64_t> leaving;
    for (const auto& [v, s] : m.available)
      if (!want.count(v)) leaving.push_back(v);
    for (int64_t v : leaving) {
      std::unique_lock lock{routing_mtx};
      const bool keep_last = m.config.policy.choice == version_policy::kind::latest && m.available.size() == 1 &&
                             std::find(on_disk.begin(), on_disk.end(), v) != on_disk.end();
      if (keep_last) continue;
      draining.push_back(std::move(m.available[v]));
      m.available.erase(v);
      m.statuses[v] = version_status{v, version_state::unloading, {}};
    }
  }

  // Unloads drained versions (no request in flight); with `wait`, waits until all have drained.
  void reap(bool wait) {
    for (;;) {
      for (auto it = draining.begin(); it != draining.end();) {
        if ((*it)->in_flight->load() == 0) {
          const int64_t v = (*it)->version;
          const std::string name = (*it)->model_name;
          it = draining.erase(it);  // unloads: the queues stop, the model unmaps
          std::unique_lock lock{routing_mtx};
          auto m = models.find(name);
          if (m != models.end() && !m->second.available.count(v))
            m->second.statuses[v] = version_status{v, version_state::end, {}};
        } else {
          ++it;
        }
      }
      if (!wait || draining.empty()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void scan(bool wait_for_drains) {
    std::lock_guard<std::mutex> guard{scan_mtx};
    for (auto& [name, m] : models) scan_model(m);
    reap(wait_for_drains);
  }

  void poll_loop() {
    std::unique_lock<std::mutex> lock{stop_mtx};
    while (!stopping) {
      stop_cv.wait_for(lock, options.poll_interval, [this] { return stopping; });
      if (stopping) break;
      lock.unlock();
      scan(false);
      lock.lock();
    }
  }

  // The version a spec resolves to, counted in flight; not_found naming what is missing.
  expected<std::shared_ptr<servable>> resolve(const model_spec& spec) const {
    std::shared_lock lock{routing_mtx};
    auto m = models.find(spec.name);
    if (m == models.end()) return make_error(errc::not_found, "Servable not found for request: model '" + spec.name + "' is not served");
    const auto& entry = m->second;
    std::optional<int64_t> version = spec.version;
    if (!spec.version_label.empty()) {
      auto label = entry.config.version_labels.find(spec.version_label);
      if (label == entry.config.version_labels.end())
        return make_error(errc::not_found, "model '" + spec.name + "' has no version label '" + spec.version_label + "'");
      version = label->second;
    }
    if (version) {
      auto v = entry.available.find(*version);
      if (v == entry.available.end())
        return make_error(errc::not_found, "Servable not found for request: model '" + spec.name + "' version " +
                                               std::to_string(*version) + " is not available");
      return v->second;
    }
    if (entry.available.empty())
      return make_error(errc::not_found, "Servable not found for request: model '" + spec.name + "' has no available version");
    return entry.available.rbegin()->second;
  }
};

namespace {

// What start() and reconfigure() refuse: no models, a nameless or twice-named one, a base path
// that is not a directory, a specific policy without versions.
expected<void> check_models(const std::vector<model_config>& models) {
  if (models.empty()) return make_error(errc::invalid_argument, "serving: no model to serve");
  std::set<std::string_view> names;
  for (const auto& config : models) {
    if (config.name.empty()) return make_error(errc::invalid_argument, "serving: a model without a name");
    std::error_code ec;
    if (!fs::is_directory(config.base_path, ec))
      return make_error(errc::invalid_argument, "serving: model '" + config.name + "': base path '" + config.base_path +
                                                    "' is not a directory");
    if (config.policy.choice == version_policy::kind::specific && config.policy.specific_versions.empty())
      return make_error(errc::invalid_argument, "serving: model '" + config.name + "': a specific version policy without versions");
    if (!names.insert(config.name).second) return make_error(errc::invalid_argument, "serving: model '" + config.name + "' is configured twice");
  }
  return {};
}

}  // namespace

expected<std::unique_ptr<model_server>> model_server::start(runtime& rt, std::vector<model_config> models,
                                                            server_options options, std::shared_ptr<serving_metrics> metrics) {
  AF_TRY(check_models(models));
  auto state = std::make_unique<impl>();
  state->rt = &rt;
  state->options = std::move(options);
  state->metrics = std::move(metrics);
  for (auto& config : models) {
    const std::string name = config.name;
    state->models.emplace(name, model_entry{std::move(config), {}, {}, {}});
  }
  auto server = std::unique_ptr<model_server>(new model_server(std::move(state)));
  impl* self = server->impl_.get();
  if (self->metrics)
    self->metrics->set_queue_source([self] {
      std::vector<queue_sample> out;
      std::shared_lock lock{self->routing_mtx};
      for (const auto& [name, m] : self->models)
        for (const auto& [v, s] : m.available)
          for (const auto& [sig, q] : s->queues)
            out.push_back(queue_sample{name, v, sig, q.queue.queued_rows(), q.queue.stats()});
      return out;
    });
  self->scan(true);
  if (self->options.poll_interval.count() > 0) self->poller = std::thread([self] { self->poll_loop(); });
  return server;
}

model_server::model_server(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

model_server::~model_server() {
  {
    std::lock_guard<std::mutex> guard{impl_->stop_mtx};
    impl_->stopping = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->poller.joinable()) impl_->poller.join();
  if (impl_->metrics) impl_->metrics->set_queue_source(nullptr);
  // Queues answer what still waits with cancelled and stop before the models unmap.
  std::lock_guard<std::mutex> guard{impl_->scan_mtx};
  impl_->draining.clear();
  std::unique_lock lock{impl_->routing_mtx};
  for (auto& [name, m] : impl_->models) m.available.clear();
}

namespace {

// TF Serving's answer: the model is there, the request asks it for something it does not have
// (FAILED_PRECONDITION over gRPC, 400 over REST).
error unknown_signature(const model_spec& spec, int64_t version, std::string_view signature_name) {
  return make_error(errc::failed_precondition, "Serving signature key \"" + std::string{signature_name} + "\" not found (model '" +
                                                   spec.name + "' version " + std::to_string(version) + ")");
}

}  // namespace

void model_server::predict_async(const model_spec& spec, std::vector<named_tensor> inputs,
                                 std::optional<clock_type::time_point> deadline, std::function<void(expected<prediction>)> done) {
  auto found = impl_->resolve(spec);
  if (!found) return done(found.error_value());
  const std::shared_ptr<servable>& s = *found;
  const std::string signature_name = spec.signature_name.empty() ? std::string{saved_model::default_signature} : spec.signature_name;
  auto queue = s->queues.find(signature_name);
  if (queue == s->queues.end())
    return done(unknown_signature(spec, s->version, signature_name));
  const std::shared_ptr<const graph::signature>& sig = queue->second.signature;
  // Inputs by name, in the signature's order.
  std::vector<tensor> ordered;
  for (const auto& want : sig->inputs) {
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const named_tensor& t) { return t.name == want.name; });
    if (it == inputs.end())
      return done(make_error(errc::invalid_argument, "signature '" + signature_name + "' needs input '" + want.name + "'"));
    ordered.push_back(std::move(it->value));
  }
  if (inputs.size() != sig->inputs.size())
    for (const auto& given : inputs)
      if (std::none_of(sig->inputs.begin(), sig->inputs.end(), [&](const graph::tensor_spec& t) { return t.name == given.name; }))
        return done(make_error(errc::invalid_argument, "signature '" + signature_name + "' has no input '" + given.name + "'"));
  auto in_flight = s->in_flight;
  in_flight->fetch_add(1);
  const auto started = clock_type::now();
  queue->second.queue.predict_async(
      std::move(ordered), deadline,
      [in_flight, done = std::move(done), metrics = impl_->metrics, answered = queue->second.answered, model = spec.name,
       version = s->version, signature = sig, started](expected<std::vector<tensor>> outputs) mutable {
        if (metrics) {
          const double seconds = std::chrono::duration<double>(clock_type::now() - started).count();
          if (outputs && answered) serving_metrics::observe(*answered, seconds);
          else metrics->record_request(model, version, signature->name, outputs ? "OK" : to_string(outputs.error_value().code), seconds);
        }
        if (!outputs) done(outputs.error_value());
        else done(prediction{std::move(model), version, std::move(signature), std::move(*outputs)});
        in_flight->fetch_sub(1);
      });
}

expected<prediction> model_server::predict(const model_spec& spec, std::vector<named_tensor> inputs,
                                           std::optional<clock_type::time_point> deadline) {
  std::mutex mtx;
  std::condition_variable cv;
  std::optional<expected<prediction>> answer;
  predict_async(spec, std::move(inputs), deadline, [&](expected<prediction> a) {
    std::lock_guard<std::mutex> guard{mtx};
    answer.emplace(std::move(a));
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock{mtx};
  cv.wait(lock, [&] { return answer.has_value(); });
  return std::move(*answer);
}

expected<std::vector<version_status>> model_server::status(const std::string& model, std::optional<int64_t> version) const {
  std::shared_lock lock{impl_->routing_mtx};
  auto m = impl_->models.find(model);
  if (m == impl_->models.end()) return make_error(errc::not_found, "Could not find any versions of model " + model);
  std::vector<version_status> out;
  for (auto it = m->second.statuses.rbegin(); it != m->second.statuses.rend(); ++it)
    if (!version || it->first == *version) out.push_back(it->second);
  if (version && out.empty())
    return make_error(errc::not_found, "Could not find version " + std::to_string(*version) + " of model " + model);
  return out;
}

expected<std::pair<int64_t, std::vector<graph::signature>>> model_server::signatures(const model_spec& spec) const {
  AF_TRY_ASSIGN(auto s, impl_->resolve(spec));
  return std::pair<int64_t, std::vector<graph::signature>>{s->version, s->model.signatures()};
}

expected<std::shared_ptr<const graph::signature>> model_server::find_signature(const model_spec& spec) const {
  AF_TRY_ASSIGN(auto s, impl_->resolve(spec));
  const std::string_view name = spec.signature_name.empty() ? saved_model::default_signature : std::string_view{spec.signature_name};
  auto q = s->queues.find(name);
  if (q == s->queues.end())
    return unknown_signature(spec, s->version, name);
  return q->second.signature;
}

expected<void> model_server::admit(const model_spec& spec) const {
  const auto started = clock_type::now();
  AF_TRY_ASSIGN(auto s, impl_->resolve(spec));
  const std::string_view name = spec.signature_name.empty() ? saved_model::default_signature : std::string_view{spec.signature_name};
  auto q = s->queues.find(name);
  // A signature named in the body, not yet known here: predict_async decides once it is decoded.
  if (q == s->queues.end() || !q->second.queue.refuse_if_full()) return {};
  if (q->second.refused) serving_metrics::observe(*q->second.refused, std::chrono::duration<double>(clock_type::now() - started).count());
  return make_error(errc::resource_exhausted, "the batching queue of model '" + spec.name + "' version " + std::to_string(s->version) +
                                                  " is full (" + std::to_string(q->second.queue.capacity_rows()) +
                                                  " rows waiting); try again later");
}

std::vector<std::string> model_server::model_names() const {
  std::shared_lock lock{impl_->routing_mtx};
  std::vector<std::string> out;
  for (const auto& [name, m] : impl_->models) out.push_back(name);
  return out;
}

void model_server::poll_now() { impl_->scan(true); }

expected<void> model_server::reconfigure(std::vector<model_config> models) {
  AF_TRY(check_models(models));
  impl& self = *impl_;
  std::lock_guard<std::mutex> guard{self.scan_mtx};
  std::set<std::string, std::less<>> kept;
  for (auto& config : models) {
    kept.insert(config.name);
    auto it = self.models.find(config.name);
    if (it != self.models.end() && it->second.config.base_path == config.base_path) {
      // The same versions on disk: the new policy decides which stay, the labels change at once.
      std::unique_lock lock{self.routing_mtx};
      it->second.config = std::move(config);
      continue;
    }
    // A new model, or a new base path: its versions load before anything of the old one leaves.
    model_entry fresh{config, {}, {}, {}};
    self.scan_model(fresh);
    std::unique_lock lock{self.routing_mtx};
    if (it != self.models.end()) {
      for (auto& [v, s] : it->second.available) self.draining.push_back(std::move(s));
      it->second = std::move(fresh);
    } else {
      self.models.emplace(config.name, std::move(fresh));
    }
  }
  // Models left out: no new requests reach them; those in flight finish before they unload.
  for (auto it = self.models.begin(); it != self.models.end();) {
    if (kept.count(it->first)) {
      ++it;
      continue;
    }
    std::unique_lock lock{self.routing_mtx};
    for (auto& [v, s] : it->second.available) self.draining.push_back(std::move(s));
    it = self.models.erase(it);
  }
  for (auto& [name, m] : self.models) self.scan_model(m);
  self.reap(false);
  return {};
}

}  // namespace af::serving
