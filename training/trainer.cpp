// fit, evaluate and predict over dataset pipelines.

#include "training/trainer.hpp"

#include <algorithm>
#include <optional>

#include "ops/array_ops.hpp"
#include "ops/train/metrics.hpp"
#include "pipeline/feed.hpp"
#include "strategies/strategy.hpp"
#include "training/progress.hpp"

namespace af::train {

namespace {

/// Batches that wait in the replica's mailbox while it runs a step: the next step's input is
/// ready when a step ends, and no more than two batches are held beyond the pipeline's own slots.
constexpr std::size_t replica_slots = 2;

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x7F4A7C159E3779B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The field fit's epochs carry their epoch number in (dataset::passes); models never read it.
const std::string epoch_field = "__fit_epoch";

/// The base seed of fit's iteration: unseeded shuffles draw from it and from the epoch number
/// (dataset::passes numbers the passes by epoch), so every epoch has its own order and a restored
/// fit replays the same one.
uint64_t fit_base_seed(uint64_t seed) { return mix(seed, 0x5eed); }

/// The position at the start of an epoch, as callbacks see it.
data::iterator_state epoch_start(const data::dataset& train, uint64_t seed) {
  return {fit_base_seed(seed), 0, train.to_dot()};
}

/// Where in the run a batch is, for error messages: "epoch 2/10, batch 17".
std::string batch_place(int epoch, int epochs, int64_t batch, const element& e) {
  std::string out = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs) + ", batch " + std::to_string(batch + 1);
  if (e.origin.known()) out += " (" + e.origin.to_string() + ")";
  return out;
}

expected<std::vector<tensor>> fields_of(const element& e, const std::vector<std::string>& names, const char* role) {
  std::vector<tensor> out;
  for (const auto& name : names) {
    const tensor* t = e.find(name);
    if (t == nullptr) {
      std::string have;
      for (const auto& f : e.fields) have += (have.empty() ? "" : ", ") + f.name;
      return make_error(errc::invalid_argument, std::string{"the batch has no field '"} + name + "' for " + role + " (it has: " + have + ")");
    }
    out.push_back(*t);
  }
  return out;
}

/// The loss and the compiled metrics of every output, kept over an epoch.
class epoch_figures {
 public:
  static expected<epoch_figures> make(const nn::model& m) {
    epoch_figures f;
    f.loss_ = metrics::mean("loss");
    const std::size_t outputs = m.output_specs().size();
    for (std::size_t i = 0; i < outputs; ++i) {
      AF_TRY_ASSIGN(auto list, m.make_metrics(i));
      for (auto& metric : list) f.metrics_.push_back({i, outputs > 1 ? "output_" + std::to_string(i) + "_" : "", std::move(metric)});
    }
    return f;
  }

  expected<void> add(const nn::batch_result& r, const std::vector<tensor>& targets, int64_t batch) {
    AF_TRY_ASSIGN(auto weighted, tensor::full({batch}, r.loss, dtype::f64));
    AF_TRY(loss_->update(weighted, weighted));
    for (auto& m : metrics_) AF_TRY(m.metric->update(targets[m.output], r.predictions[m.output]));
    return {};
  }

  logs values(const std::string& prefix = "") const {
    logs out{{prefix + "loss", loss_->result()}};
    for (const auto& m : metrics_) out.emplace_back(prefix + m.prefix + m.metric->name(), m.metric->result());
    return out;
  }

 private:
  struct entry {
    std::size_t output;
    std::string prefix;
    std::unique_ptr<metrics::metric> metric;
  };
  std::unique_ptr<metrics::metric> loss_;
  std::vector<entry> metrics_;
};

template <class Hook>
expected<void> for_each_callback(const fit_options& o, Hook&& hook) {
  for (const auto& cb : o.callbacks) {
    auto r = hook(*cb);
    if (!r) return with_context(r.error_value(), "callback");
  }
  return {};
}

}  // namespace

std::optional<double> find_log(const logs& l, const std::string& key) {
  for (const auto& [k, v] : l)
    if (k == key) return v;
  return std::nullopt;
}

std::vector<double> history::of(const std::string& key) const {
  std::vector<double> out;
  for (const auto& e : epochs)
    if (auto v = find_log(e, key)) out.push_back(*v);
  return out;
}

ckpt::checkpoint fit_context::snapshot() const {
  ckpt::checkpoint ck;
  ck.tensors = model->state();
  ck.metadata = {{"epoch", std::to_string(epoch)},
                 {"batch_in_epoch", std::to_string(batch_in_epoch)},
                 {"seed", std::to_string(seed)},
                 {"iterator", position.serialize()}};
  return ck;
}

expected<void> fit_context::restore(const ckpt::checkpoint& saved) {
  for (const char* key : {"epoch", "batch_in_epoch", "iterator"})
    if (saved.meta(key) == nullptr) return make_error(errc::malformed_input, std::string{"the checkpoint has no '"} + key + "' entry");
  AF_TRY_ASSIGN(auto position_saved, data::iterator_state::deserialize(*saved.meta("iterator")));
  AF_TRY(model->load_state(saved.tensors));
  epoch = std::stoi(*saved.meta("epoch"));
  batch_in_epoch = std::stoll(*saved.meta("batch_in_epoch"));
  position = position_saved;
  resume_position = std::move(position_saved);
  return {};
}

expected<history> fit(runtime& rt, nn::model& model, const data::dataset& train, fit_options options) {
  if (!model.compiled()) return make_error(errc::invalid_argument, "fit: compile the model first");
  if (options.targets.size() != model.output_specs().size())
    return make_error(errc::invalid_argument, "fit: " + std::to_string(options.targets.size()) + " target fields for " +
                                                  std::to_string(model.output_specs().size()) + " model outputs");
  fit_context ctx;
  ctx.model = &model;
  ctx.epochs = options.epochs;
  ctx.seed = options.seed;
  ctx.position = epoch_start(train, options.seed);
  AF_TRY(for_each_callback(options, [&](callback& cb) { return cb.on_train_begin(ctx); }));
  const auto strategy = options.strategy ? options.strategy : distribute::default_strategy();
  auto started_replicas = strategy->start(rt, model);
  if (!started_replicas) return with_context(started_replicas.error_value(), "fit: starting " + strategy->describe());
  distribute::replica_set& replicas = **started_replicas;

  const bool quiet = options.verbose == verbosity::silent || options.out == nullptr;
  const bool bar = options.verbose == verbosity::auto_detect && is_terminal(options.out);
  const auto inputs = model.input_names();
  const std::string fingerprint = train.to_dot();
  int64_t batches_per_epoch = options.steps_per_epoch;
  history h;

  // What the replica works with during an epoch. The fit thread sets it up between epochs, while
  // the feed is paused (or before it starts); the feed's pause and resume hand it over.
  uint64_t base_seed = ctx.position.base_seed;
  std::optional<epoch_figures> figures;
  std::optional<progress_display> progress;
  int64_t samples = 0;
  auto epoch_done = [&] { return options.steps_per_epoch > 0 && ctx.batch_in_epoch >= options.steps_per_epoch; };
  // Set by the replica when a callback needs the pipeline's position after this batch: the feed
  // pauses, and this thread takes the snapshot and runs the batch's callbacks.
  std::optional<logs> batch_end_here;
  auto position_needed = [&] {
    return std::any_of(options.callbacks.begin(), options.callbacks.end(),
                       [&](const auto& cb) { return cb->needs_position(ctx); });
  };
  // The replica: runs on the actor the pipeline feeds, one batch at a time; this thread waits.
  auto train_step = [&](element&& batch) -> expected<data::feed_verdict> {
    if (const tensor* pass = batch.find(epoch_field)) {
      const auto epoch_of_batch = pass->item<int64_t>();
      if (epoch_of_batch > ctx.epoch) return data::feed_verdict::hold;  // the next epoch's first batch
      if (epoch_of_batch < ctx.epoch)
        return make_error(errc::protocol_violation, "fit: a batch of epoch " + std::to_string(epoch_of_batch + 1) + " came in epoch " +
                                              std::to_string(ctx.epoch + 1));
      std::erase_if(batch.fields, [](const named_tensor& f) { return f.name == epoch_field; });  // not the user's
    }
    const std::string place = batch_place(ctx.epoch, options.epochs, ctx.batch_in_epoch, batch);
    auto x = fields_of(batch, inputs, "an input");
    auto y = x ? fields_of(batch, options.targets, "a target") : expected<std::vector<tensor>>{x.error_value()};
    if (!y) return with_context(y.error_value(), "fit: " + place);
    auto result = replicas.train_on_batch(*x, *y, mix(options.seed, static_cast<uint64_t>(model.updates_done())));
    if (!result) return with_context(result.error_value(), "fit: " + place);
    const int64_t rows = (*x)[0].dim(0);
    if (auto ok = figures->add(*result, *y, rows); !ok) return with_context(ok.error_value(), "fit: " + place);
    ++ctx.batch_in_epoch;
    samples += rows;
    ctx.position = {base_seed, static_cast<uint64_t>(ctx.batch_in_epoch), fingerprint};
    const logs running = figures->values();
    if (!epoch_done() && position_needed()) {
      batch_end_here = running;
      return data::feed_verdict::pause;
    }
    AF_TRY(for_each_callback(options, [&](callback& cb) { return cb.on_batch_end(ctx, running); }));
    progress->update(ctx.batch_in_epoch, samples, running);
    return epoch_done() ? data::feed_verdict::stop : data::feed_verdict::more;
  };
  // A pause the replica asked for after a batch: the position for its callbacks, which run here.
  auto run_batch_end_here = [&](data::feed_session& feed) -> expected<void> {
    const logs running = std::move(*batch_end_here);
    batch_end_here.reset();
    auto at = feed.snapshot();
    at.base_seed = base_seed;
    at.consumed = static_cast<uint64_t>(ctx.batch_in_epoch);
    at.fingerprint = fingerprint;
    ctx.position = std::move(at);
    AF_TRY(replicas.sync_into_model());
    AF_TRY(for_each_callback(options, [&](callback& cb) { return cb.on_batch_end(ctx, running); }));
    AF_TRY(replicas.reload_from_model());  // what the callbacks saw (or changed) is what every replica goes on from
    progress->update(ctx.batch_in_epoch, samples, running);
    return {};
  };

  // The epochs run through one topology (dataset::passes): at an epoch's end the replica holds
  // the next epoch's first batch and the feed pauses, the pipeline keeps preparing the next
  // epoch while validation and the callbacks run here, and the feed resumes. With
  // steps_per_epoch, each epoch is a feed of its own that stops after its steps.
  std::optional<data::feed_session> session;
  for (int epoch = ctx.epoch; epoch < options.epochs && !ctx.stop_training; ++epoch) {
    ctx.epoch = epoch;
    uint64_t skip = 0;
    std::optional<data::iterator_state> restored;
    if (ctx.resume_position) {
      base_seed = ctx.resume_position->base_seed;
      skip = ctx.resume_position->consumed;
      restored = std::move(ctx.resume_position);
      ctx.resume_position.reset();
    }
    ctx.batch_in_epoch = static_cast<int64_t>(skip);
    ctx.position = {base_seed, skip, fingerprint};
    AF_TRY(for_each_callback(options, [&](callback& cb) { return cb.on_epoch_begin(ctx); }));
    AF_TRY(replicas.reload_from_model());  // a callback may have changed the model
    AF_TRY_ASSIGN(auto made, epoch_figures::make(model));
    figures.emplace(std::move(made));
    if (!quiet) std::fprintf(options.out, "Epoch %d/%d\n", epoch + 1, options.epochs);
    progress.emplace(quiet ? nullptr : options.out, bar, batches_per_epoch);
    samples = 0;
    if (!session && !epoch_done()) {
      const int passes = options.steps_per_epoch > 0 ? 1 : options.epochs - epoch;
      const auto epochs = train.passes(epoch, passes, epoch_field);
      data::iterator_state from{base_seed, skip, epochs.to_dot()};
      if (restored && restored->stages) {
        // The stages' state of the saved run (the passes from its first epoch; a pass keeps its
        // number, so they continue in these passes), and the batches it had ready.
        from.stages = std::move(restored->stages);
        from.pending = std::move(restored->pending);
      }
      AF_TRY_ASSIGN(auto started, data::start_feed(rt, epochs, train_step,
                                                   {.name = "replica", .slots = replica_slots, .from = std::move(from)}));
      session.emplace(std::move(started));
    } else if (session) {
      session->resume();
    }
    while (session) {
      const bool paused = session->wait();
      if (paused && batch_end_here) {
        AF_TRY(run_batch_end_here(*session));
        session->resume();
        continue;
      }
      if (!paused) {
        auto fed = session->finish();
        session.reset();
        if (fed.status && !fed.handler_failed)
          return with_context(fed.status, "fit: epoch " + std::to_string(epoch + 1) + ", batch " + std::to_string(ctx.batch_in_epoch + 1));
        if (fed.status) return fed.status;
      }
      break;
    }
    if (ctx.batch_in_epoch == 0)
      return make_error(errc::invalid_argument, "fit: epoch " + std::to_string(epoch + 1) + "/" + std::to_string(options.epochs) +
                                                    ": the training dataset gave no batches");
    if (batches_per_epoch == 0 && skip == 0) batches_per_epoch = ctx.batch_in_epoch;
    logs epoch_logs = figures->values();
    AF_TRY(replicas.sync_into_model());
    if (options.validation_data) {
      auto val = evaluate(rt, model, *options.validation_data, {.targets = options.targets});
      if (!val) return with_context(val.error_value(), "fit: validation after epoch " + std::to_string(epoch + 1));
      for (const auto& [k, v] : *val) epoch_logs.emplace_back("val_" + k, v);
    }
    progress->finish(ctx.batch_in_epoch, samples, epoch_logs);
    // The next epoch starts at its beginning: a snapshot taken now must not replay this one.
    ctx.position = {base_seed, 0, fingerprint};
    ctx.batch_in_epoch = 0;
    ctx.epoch = epoch + 1;
    AF_TRY(for_each_callback(options, [&](callback& cb) { return cb.on_epoch_end(ctx, epoch_logs); }));
    h.epochs.push_back(std::move(epoch_logs));
  }
  if (session) session->finish();  // stopped early: the epochs not run are cancelled
  AF_TRY(for_each_callback(options, [&](callback& cb) { return cb.on_train_end(ctx); }));
  return h;
}

expected<logs> evaluate(runtime& rt, nn::model& model, const data::dataset& data, evaluate_options options) {
  if (!model.compiled()) return make_error(errc::invalid_argument, "evaluate: compile the model first");
  AF_TRY_ASSIGN(auto figures, epoch_figures::make(model));
  const auto inputs = model.input_names();
  const bool quiet = options.verbose == verbosity::silent || options.out == nullptr;
  progress_display progress{quiet ? nullptr : options.out, !quiet && is_terminal(options.out), 0};
  int64_t batches = 0, samples = 0;
  auto test_step = [&](element&& batch) -> expected<data::feed_verdict> {
    const std::string place = "batch " + std::to_string(batches + 1) + (batch.origin.known() ? " (" + batch.origin.to_string() + ")" : "");
    auto x = fields_of(batch, inputs, "an input");
    auto y = x ? fields_of(batch, options.targets, "a target") : expected<std::vector<tensor>>{x.error_value()};
    if (!y) return with_context(y.error_value(), "evaluate: " + place);
    auto result = model.test_on_batch(*x, *y);
    if (!result) return with_context(result.error_value(), "evaluate: " + place);
    const int64_t rows = (*x)[0].dim(0);
    if (auto ok = figures.add(*result, *y, rows); !ok) return with_context(ok.error_value(), "evaluate: " + place);
    ++batches;
    samples += rows;
    progress.update(batches, samples, figures.values());
    return data::feed_verdict::more;
  };
  AF_TRY_ASSIGN(auto fed, data::feed(rt, data, test_step, {.name = "replica", .slots = replica_slots}));
  if (fed.status && !fed.handler_failed) return with_context(fed.status, "evaluate: batch " + std::to_string(batches + 1));
  if (fed.status) return fed.status;
  if (batches == 0) return make_error(errc::invalid_argument, "evaluate: the dataset is empty");
  progress.finish(batches, samples, figures.values());
  return figures.values();
}

expected<std::vector<tensor>> predict(runtime& rt, nn::model& model, const data::dataset& data) {
  const auto inputs = model.input_names();
  std::vector<std::vector<tensor>> parts(model.output_specs().size());
  int64_t batches = 0;
  auto predict_step = [&](element&& batch) -> expected<data::feed_verdict> {
    const std::string place = "predict: batch " + std::to_string(batches + 1);
    auto x = fields_of(batch, inputs, "an input");
    if (!x) return with_context(x.error_value(), place);
    auto out = model.predict_on_batch(*x);
    if (!out) return with_context(out.error_value(), place);
    for (std::size_t i = 0; i < parts.size(); ++i) parts[i].push_back((*out)[i]);
    ++batches;
    return data::feed_verdict::more;
  };
  AF_TRY_ASSIGN(auto fed, data::feed(rt, data, predict_step, {.name = "replica", .slots = replica_slots}));
  if (fed.status && !fed.handler_failed) return with_context(fed.status, "predict: batch " + std::to_string(batches + 1));
  if (fed.status) return fed.status;
  std::vector<tensor> joined;
  for (auto& p : parts) {
    if (p.empty()) return make_error(errc::invalid_argument, "predict: the dataset is empty");
    AF_TRY_ASSIGN(auto all, concat(p, 0));
    joined.push_back(std::move(all));
  }
  return joined;
}

}  // namespace af::train
