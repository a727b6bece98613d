// The replica group of actors/replica.hpp: replica actors on threads of their own (a step blocks in
// the ring's collectives and runs kernels, which would stall a scheduler worker), the bucket plan
// shared by every replica, and the step each replica runs: gradients, bucketed all-reduce, update.

#include "actors/replica.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/result.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <cstring>
#include <optional>

#include "actors/caf_error.hpp"
#include "actors/collectives.hpp"
#include "actors/message_types.hpp"
#include "actors/runtime.hpp"
#include "actors/stop_actors.hpp"
#include "ops/array_ops.hpp"
#include "ops/elementwise.hpp"
#include "ops/parallel.hpp"
#include "ops/reduce.hpp"
#include "ops/runtime/executor.hpp"
#include "ops/train/model.hpp"

namespace af::replicas {

namespace {

using replica_step_atom = caf::atom_constant<caf::atom("af_rstep")>;
using replica_load_atom = caf::atom_constant<caf::atom("af_rload")>;
using replica_read_atom = caf::atom_constant<caf::atom("af_rread")>;
using replica_mean_atom = caf::atom_constant<caf::atom("af_rmean")>;

// (step, inputs, targets, seed, share, learning rate) -> (loss, per-output losses as f64, predictions)
using replica_actor = caf::typed_actor<
    caf::replies_to<replica_step_atom, uint64_t, std::vector<tensor>, std::vector<tensor>, uint64_t, double, double>::with<
        double, tensor, std::vector<tensor>>,
    caf::replies_to<replica_load_atom, std::vector<named_tensor>>::with<uint64_t>,
    caf::replies_to<replica_read_atom>::with<std::vector<tensor>>,
    caf::replies_to<replica_mean_atom, uint64_t>::with<uint64_t>>;

/// Which trainable weights' gradients travel together: same dtype, at most bucket_bytes (a larger
/// weight alone), in reverse weight order (the order a backward pass produces them).
struct bucket {
  dtype type = dtype::f32;
  std::vector<std::size_t> members;  // indices into the trainable gradients
  int64_t numel = 0;
};

/// What every replica of a group shares: the ring, the buckets, its share of the cores.
struct group_context {
  std::string name;
  std::shared_ptr<collectives::ring_group> ring;
  std::vector<bucket> buckets;
  std::vector<shape> gradient_shapes;
  std::vector<dtype> gradient_types;
  int threads = 1;
  int replicas = 1;  // in every process together: the ring's ranks
  int processes = 1;
  int first_rank = 0;  // this process's first replica
  bool overlap = true;
  int accumulation_steps = 1;  // batches whose gradients make one update
  bool reduce_in_bf16 = false;
};

/// A replica's gradients of the batches since its last update (accumulation_steps > 1).
struct accumulation {
  std::vector<tensor> sum;  // per trainable weight; empty before the first batch of a window
  int batches = 0;          // batches added since the last update
  std::optional<error> failure;  // the first batch of the window that failed here

  expected<void> add(std::vector<tensor>& gradients) {
    if (sum.empty()) {
      sum = std::move(gradients);
      return {};
    }
    for (std::size_t k = 0; k < sum.size(); ++k) {
      if (!gradients[k].defined()) continue;
      if (!sum[k].defined()) {
        sum[k] = std::move(gradients[k]);
        continue;
      }
      AF_TRY_ASSIGN(sum[k], af::add(sum[k], gradients[k]));
    }
    return {};
  }
};

std::vector<bucket> plan_buckets(const std::vector<shape>& shapes, const std::vector<dtype>& types, std::size_t bucket_bytes) {
  std::vector<bucket> out;
  for (std::size_t k = shapes.size(); k-- > 0;) {
    const int64_t n = numel(shapes[k]);
    const auto bytes = [&](int64_t elements) { return static_cast<std::size_t>(elements) * size_of(types[k]); };
    if (out.empty() || out.back().type != types[k] || (out.back().numel > 0 && bytes(out.back().numel + n) > bucket_bytes))
      out.push_back({types[k], {}, 0});
    out.back().members.push_back(k);
    out.back().numel += n;
  }
  if (out.empty()) out.push_back({dtype::f32, {}, 0});  // carries the failure flag alone
  return out;
}

// The last bucket ends with one more element, the sum over replicas of each failed replica's mark:
// 2^rank in a group of up to 24 (exact in f32, so the message names them; 8 when the buckets are
// summed in bf16, whose 8 significant bits hold any sum of 2^0 .. 2^7), else 1 (a count). It is
// started last, once the replica knows how its part went.
int named_failures_up_to(bool bf16) { return bf16 ? 8 : 24; }

double failure_mark(int rank, int replicas, bool bf16) {
  return replicas <= named_failures_up_to(bf16) ? static_cast<double>(int64_t{1} << rank) : 1.0;
}

std::string failed_ranks(double flags, int replicas, bool bf16) {
  if (replicas > named_failures_up_to(bf16)) return std::to_string(static_cast<int64_t>(flags)) + " replica(s)";
  const auto bits = static_cast<int64_t>(flags);
  std::string out;
  for (int r = 0; r < replicas; ++r)
    if (bits & (int64_t{1} << r)) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return "replica " + out;
}

/// Bucket `b` as one flat tensor: each member's gradient (zeros where `gradients` has none), then
/// the flag in the last bucket.
expected<tensor> pack(const group_context& g, std::size_t b, const std::vector<tensor>& gradients, double flag) {
  const bucket& bk = g.buckets[b];
  const bool last = b + 1 == g.buckets.size();
  const int64_t extra = last ? 1 : 0;
  AF_TRY_ASSIGN(auto flat, tensor::zeros({bk.numel + extra}, bk.type));
  auto* out = static_cast<char*>(flat.raw_data());
  const std::size_t item = size_of(bk.type);
  for (std::size_t k : bk.members) {
    const std::size_t bytes = static_cast<std::size_t>(numel(g.gradient_shapes[k])) * item;
    if (gradients[k].defined()) {
      AF_TRY_ASSIGN(auto dense, gradients[k].contiguous());
      std::memcpy(out, dense.raw_data(), bytes);
    }
    out += bytes;
  }
  if (last) {
    if (bk.type == dtype::f64) std::memcpy(out, &flag, sizeof flag);
    else {
      const auto f = static_cast<float>(flag);
      std::memcpy(out, &f, sizeof f);
    }
  }
  if (g.reduce_in_bf16) return cast(flat, dtype::bf16);  // half the bytes through the ring
  return flat;
}

/// Whether a computed gradient is what the buckets expect for weight `k`.
error check_gradient(const group_context& g, std::size_t k, const tensor& grad) {
  if (grad.shape() == g.gradient_shapes[k] && grad.type() == g.gradient_types[k]) return {};
  return {errc::internal, "gradient " + std::to_string(k) + " is " + std::string{to_string(grad.type())} + to_string(grad.shape()) +
                              ", its weight " + std::string{to_string(g.gradient_types[k])} + to_string(g.gradient_shapes[k])};
}

/// The buckets of one replica's step: started in order, each as soon as its gradients exist (the
/// last one only when the replica knows whether its part failed), then waited for in order.
class bucket_reducer {
 public:
  bucket_reducer(const group_context& g, int rank, uint64_t step, std::vector<tensor> accumulated)
      : g_(g), rank_(rank), step_(step), gradients_(g.gradient_shapes.size()), accumulated_(std::move(accumulated)),
        missing_(g.buckets.size()), bucket_of_(gradients_.size()) {
    accumulated_.resize(gradients_.size());
    for (std::size_t b = 0; b < g.buckets.size(); ++b) {
      missing_[b] = g.buckets[b].members.size();
      for (std::size_t k : g.buckets[b].members) bucket_of_[k] = b;
    }
  }

  /// A gradient the backward pass has just computed (to which the earlier batches' of the window
  /// are added): its bucket starts if it and those before it are complete.
  void arrived(std::size_t k, const tensor& grad) {
    if (k >= gradients_.size() || gradients_[k].defined()) return;
    if (accumulated_[k].defined()) {
      auto total = af::add(grad, accumulated_[k]);
      if (!total) {
        if (!failed_) failed_ = total.error_value();
        return;
      }
      return take(k, *total);
    }
    take(k, grad);
  }

  /// An earlier batch of the window failed on this replica: no replica applies the window's update.
  void fail(const error& why) {
    if (!failed_) failed_ = why;
  }

  void take(std::size_t k, const tensor& grad) {
    if (auto bad = check_gradient(g_, k, grad)) {
      if (!failed_) failed_ = bad;
      return;  // the bucket carries zeros there
    }
    gradients_[k] = grad;
    --missing_[bucket_of_[k]];
    while (started_ + 1 < g_.buckets.size() && missing_[started_] == 0) start(started_, 0.0);
    if (started_ > 0) g_.ring->progress(rank_);  // the started buckets move on between kernels
  }

  /// Starts every bucket not started yet, the last with the flag, and waits for all: the summed
  /// gradients, or an error naming this replica's failure, another replica's, or the ring's.
  expected<std::vector<tensor>> finish(const expected<nn::replica_gradients>& outcome, bool idle, const std::string& where) {
    if (outcome && !idle)
      for (std::size_t k = 0; k < gradients_.size(); ++k)
        if (!gradients_[k].defined() && !failed_) arrived(k, outcome->gradients[k]);
    if (outcome && idle)  // no rows this time, but the window's earlier batches count
      for (std::size_t k = 0; k < gradients_.size(); ++k)
        if (!gradients_[k].defined() && accumulated_[k].defined() && !failed_) take(k, accumulated_[k]);
    const bool ok = outcome && !failed_;
    if (!ok) gradients_.assign(gradients_.size(), tensor{});  // zeros for what is not started yet
    while (started_ < g_.buckets.size()) start(started_, ok ? 0.0 : failure_mark(rank_, g_.replicas, g_.reduce_in_bf16));
    std::vector<tensor> summed(gradients_.size());
    double flags = 0;
    error ring_failure;
    for (std::size_t b = 0; b < pending_.size(); ++b) {
      auto reduced = pending_[b].get();
      if (!reduced) {
        if (!ring_failure) ring_failure = reduced.error_value();
        continue;
      }
      if (reduced->type() != g_.buckets[b].type) {  // summed in bf16
        auto widened = cast(*reduced, g_.buckets[b].type);
        if (!widened) return with_context(widened.error_value(), where);
        reduced = std::move(widened);
      }
      int64_t offset = 0;
      for (std::size_t k : g_.buckets[b].members) {
        const int64_t n = numel(g_.gradient_shapes[k]);
        AF_TRY_ASSIGN(auto part, reduced->slice(0, offset, offset + n));
        AF_TRY_ASSIGN(summed[k], part.reshape(g_.gradient_shapes[k]));
        offset += n;
      }
      if (b + 1 == pending_.size()) flags = reduced->at({g_.buckets[b].numel});
    }
    if (ring_failure) return with_context(ring_failure, where);
    if (!outcome) return with_context(outcome.error_value(), where);
    if (failed_) return with_context(failed_, where);
    if (flags != 0)
      return make_error(errc::failed_precondition, where + ": " + failed_ranks(flags, g_.replicas, g_.reduce_in_bf16) +
                                                       " failed on its slice, so no replica applied this update");
    return summed;
  }

 private:
  void start(std::size_t b, double flag) {
    ++started_;
    auto flat = pack(g_, b, gradients_, flag);
    if (!flat) {  // no memory for the bucket: the others still need this rank's call
      if (!failed_) failed_ = flat.error_value();
      flat = tensor::zeros({g_.buckets[b].numel + (b + 1 == g_.buckets.size() ? 1 : 0)},
                           g_.reduce_in_bf16 ? dtype::bf16 : g_.buckets[b].type);
      if (!flat) std::abort();  // neither: nothing can be sent, and the others would wait in vain
    }
    pending_.push_back(g_.ring->start_all_reduce(rank_, {step_, static_cast<uint32_t>(b)}, std::move(*flat)));
  }

  const group_context& g_;
  int rank_;
  uint64_t step_;
  std::vector<tensor> gradients_;
  std::vector<tensor> accumulated_;  // the window's earlier batches, per weight (undefined: none)
  std::vector<std::size_t> missing_;
  std::vector<std::size_t> bucket_of_;
  std::size_t started_ = 0;
  std::vector<collectives::pending_result> pending_;
  error failed_;
};

/// Across processes, after an update every rank applied: every rank's rows, loss and predictions
/// gathered (predictions padded to the largest slice, since a gather takes one shape from all),
/// so that each process answers the global batch's result. Every rank calls it, in the same order;
/// `assemble`: this rank builds the result (a process's first replica), the others only take part.
expected<nn::batch_result> gather_batch(const group_context& g, const nn::model& model, int rank, uint64_t step,
                                        const nn::batch_result& mine, int64_t rows, bool assemble) {
  const auto specs = model.output_specs();
  const std::size_t outputs = specs.size();
  auto id = static_cast<uint32_t>(g.buckets.size());  // after the step's gradient buckets
  std::vector<double> info(2 + outputs, 0.0);
  info[0] = static_cast<double>(rows);
  if (rows > 0) {
    info[1] = mine.loss;
    for (std::size_t i = 0; i < outputs && i < mine.output_loss.size(); ++i) info[2 + i] = mine.output_loss[i];
  }
  AF_TRY_ASSIGN(auto every, g.ring->all_gather(rank, {step, id++}, tensor::from_vector(info)));
  const auto table = every.to_vector<double>();
  std::vector<int64_t> rows_of(static_cast<std::size_t>(g.replicas));
  int64_t total = 0, most = 0;
  for (std::size_t r = 0; r < rows_of.size(); ++r) {
    rows_of[r] = static_cast<int64_t>(table[r * info.size()]);
    total += rows_of[r];
    most = std::max(most, rows_of[r]);
  }
  nn::batch_result out;
  out.output_loss.assign(outputs, 0.0);
  for (std::size_t r = 0; r < rows_of.size(); ++r) {
    if (rows_of[r] == 0) continue;
    const double w = static_cast<double>(rows_of[r]) / static_cast<double>(total);
    out.loss += w * table[r * info.size() + 1];
    for (std::size_t i = 0; i < outputs; ++i) out.output_loss[i] += w * table[r * info.size() + 2 + i];
  }
  for (std::size_t i = 0; i < outputs; ++i) {
    const auto& row_dims = specs[i].dims;
    if (std::any_of(row_dims.begin(), row_dims.end(), [](int64_t d) { return d < 0; }))
      return make_error(errc::unsupported, g.name + ": output " + std::to_string(i) + " is " + to_string(specs[i]) +
                                               "; predictions gathered across processes need every dimension but the batch's known");
    const int64_t width = numel(row_dims);
    AF_TRY_ASSIGN(auto padded, tensor::zeros({most * width}, specs[i].type));
    if (rows > 0) {
      const tensor& p = mine.predictions[i];
      if (p.type() != specs[i].type || p.numel() != rows * width)
        return make_error(errc::internal, g.name + ": output " + std::to_string(i) + "'s predictions are " + std::string{to_string(p.type())} +
                                              to_string(p.shape()) + ", not " + std::to_string(rows) + " rows of " + to_string(specs[i]));
      AF_TRY_ASSIGN(auto dense, p.contiguous());
      std::memcpy(padded.raw_data(), dense.raw_data(), dense.nbytes());
    }
    AF_TRY_ASSIGN(auto gathered, g.ring->all_gather(rank, {step, id++}, padded));
    if (!assemble) continue;
    std::vector<tensor> parts;
    for (std::size_t r = 0; r < rows_of.size(); ++r) {
      if (rows_of[r] == 0) continue;
      AF_TRY_ASSIGN(auto slot, gathered.slice(0, static_cast<int64_t>(r), static_cast<int64_t>(r) + 1));
      AF_TRY_ASSIGN(auto flat, slot.reshape({most * width}));
      AF_TRY_ASSIGN(auto used, flat.slice(0, 0, rows_of[r] * width));
      af::shape dims{rows_of[r]};
      dims.insert(dims.end(), row_dims.begin(), row_dims.end());
      AF_TRY_ASSIGN(auto part, used.reshape(dims));
      parts.push_back(std::move(part));
    }
    AF_TRY_ASSIGN(auto joined, concat(parts, 0));
    out.predictions.push_back(std::move(joined));
  }
  return out;
}

/// One replica's step: its gradients, every bucket summed over the ring (each started as soon as
/// the backward pass has produced it), then the update. Every replica makes the same collective
/// calls in the same order whatever happened to its slice, so none waits in vain.
expected<nn::batch_result> step_replica(const group_context& g, nn::model& model, accumulation& window, int rank, uint64_t step,
                                        const batch_slice& slice, uint64_t seed, double share, double learning_rate, bool assemble) {
  const std::string where = g.name + ": replica " + std::to_string(rank) + " of " + std::to_string(g.replicas) + ", step " +
                            std::to_string(step + 1);
  scoped_thread_share cores{g.threads};
  // A global batch smaller than the group leaves the last replicas without rows: they add zeros.
  const bool idle = slice.inputs.empty() || slice.inputs[0].ndim() == 0 || slice.inputs[0].dim(0) == 0;
  const int64_t rows = idle ? 0 : slice.inputs[0].dim(0);
  // Each batch of a window of accumulation_steps counts for its share of the window's mean.
  const double part = share / g.accumulation_steps;
  auto global_result = [&](expected<nn::batch_result> mine) -> expected<nn::batch_result> {
    if (g.processes == 1) return mine;
    // Every rank gathers, whatever happened to its slice, so that none waits in vain.
    auto global = gather_batch(g, model, rank, step, mine ? *mine : nn::batch_result{}, mine ? rows : 0, assemble);
    if (!mine) return mine;
    if (!global) return with_context(global.error_value(), where + ", gathering the batch's results from the other processes");
    return global;
  };

  if (++window.batches < g.accumulation_steps) {  // not the window's last batch: no update yet
    expected<nn::replica_gradients> computed = nn::replica_gradients{};
    if (!idle) computed = model.compute_gradients(slice.inputs, slice.targets, seed, part);
    if (computed && !idle) {
      // Moving statistics follow every batch, as they would without accumulation.
      std::vector<tensor> values = model.weight_values();
      const auto& frozen = model.non_trainable_indices();
      for (std::size_t j = 0; j < frozen.size() && j < computed->non_trainable.size(); ++j)
        values[static_cast<std::size_t>(frozen[j])] = computed->non_trainable[j];
      auto kept = model.set_weight_values(std::move(values));
      if (kept) kept = window.add(computed->gradients);
      if (!kept) computed = kept.error_value();
    }
    if (!computed && !window.failure) window.failure = with_context(computed.error_value(), where);
    if (!computed) return global_result(*window.failure);
    return global_result(std::move(computed->batch));
  }
  auto earlier = std::move(window.sum);
  auto window_failure = std::move(window.failure);
  window = accumulation{};

  if (g.replicas == 1) {  // nothing to sum with
    AF_TRY_ASSIGN(auto alone, model.compute_gradients(slice.inputs, slice.targets, seed, part));
    if (window_failure) return *window_failure;
    for (std::size_t k = 0; k < earlier.size() && k < alone.gradients.size(); ++k) {
      if (!earlier[k].defined()) continue;
      AF_TRY_ASSIGN(alone.gradients[k], af::add(alone.gradients[k], earlier[k]));
    }
    if (auto applied = model.apply_gradients(std::move(alone.gradients), std::move(alone.non_trainable), learning_rate); !applied)
      return with_context(applied.error_value(), where);
    return std::move(alone.batch);
  }
  bucket_reducer buckets{g, rank, step, std::move(earlier)};
  if (window_failure) buckets.fail(*window_failure);
  expected<nn::replica_gradients> computed = nn::replica_gradients{};
  if (idle) {
    for (int i : model.non_trainable_indices()) computed->non_trainable.push_back(model.weight_values()[static_cast<std::size_t>(i)]);
  } else if (g.overlap) {
    computed = model.compute_gradients(slice.inputs, slice.targets, seed, part,
                                       [&](std::size_t k, const tensor& grad) { buckets.arrived(k, grad); });
  } else {
    computed = model.compute_gradients(slice.inputs, slice.targets, seed, part);
  }
  AF_TRY_ASSIGN(auto summed, buckets.finish(computed, idle, where));
  if (auto applied = model.apply_gradients(std::move(summed), std::move(computed->non_trainable), learning_rate); !applied)
    return with_context(applied.error_value(), where);
  return global_result(std::move(computed->batch));
}

/// Across processes: every rank's non-trainable weights flattened to f64 and summed (every rank of
/// every process calls it with the same id); the sum, for the caller to divide.
expected<tensor> sum_non_trainable(const group_context& g, const nn::model& model, int rank, uint64_t id) {
  std::vector<double> flat;
  for (int i : model.non_trainable_indices()) {
    const auto v = model.weight_values()[static_cast<std::size_t>(i)].to_vector<double>();
    flat.insert(flat.end(), v.begin(), v.end());
  }
  return g.ring->all_reduce(rank, {id, 0}, tensor::from_vector(flat));
}

// Collective ids of aggregations: apart from every training step's.
constexpr uint64_t aggregation_ids = uint64_t{1} << 63;

struct replica_state {
  int rank = 0;
  int replicas = 1;
  accumulation window;
  std::unique_ptr<nn::model> model;
  std::shared_ptr<const group_context> group;
  std::shared_ptr<backend> device;  // where its steps' graphs run
};

replica_actor::behavior_type replica_behaviour(replica_actor::stateful_pointer<replica_state> self, int rank, int replicas,
                                               std::shared_ptr<nn::model> model, std::shared_ptr<const group_context> group,
                                               std::shared_ptr<backend> device) {
  auto& s = self->state;
  s.device = std::move(device);
  s.rank = rank;
  s.replicas = replicas;
  s.model = std::make_unique<nn::model>(std::move(*model));
  s.group = std::move(group);
  return {
      [self](replica_step_atom, uint64_t step, std::vector<tensor>& inputs, std::vector<tensor>& targets, uint64_t seed, double share,
             double learning_rate) -> caf::result<double, tensor, std::vector<tensor>> {
        auto& st = self->state;
        batch_slice slice{std::move(inputs), std::move(targets)};
        device_actor_scope on{*st.device};
        auto r = step_replica(*st.group, *st.model, st.window, st.rank, step, slice, seed, share, learning_rate, false);
        if (!r) return to_caf_error(r.error_value());
        return caf::result<double, tensor, std::vector<tensor>>{r->loss, tensor::from_vector(r->output_loss), std::move(r->predictions)};
      },
      [self](replica_load_atom, const std::vector<named_tensor>& saved) -> caf::result<uint64_t> {
        if (auto loaded = self->state.model->load_state(saved); !loaded) return to_caf_error(loaded.error_value());
        return static_cast<uint64_t>(self->state.model->updates_done());
      },
      [self](replica_mean_atom, uint64_t id) -> caf::result<uint64_t> {
        auto sum = sum_non_trainable(*self->state.group, *self->state.model, self->state.rank, id);
        if (!sum) return to_caf_error(sum.error_value());
        return id;
      },
      [self](replica_read_atom) -> std::vector<tensor> {
        const auto& m = *self->state.model;
        std::vector<tensor> out;
        for (int i : m.non_trainable_indices()) out.push_back(m.weight_values()[static_cast<std::size_t>(i)]);
        return out;
      },
  };
}

uint64_t mix_seed(uint64_t seed, uint64_t rank) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (rank + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

struct replica_group::impl {
  caf::actor_system* sys = nullptr;
  nn::model* model = nullptr;
  std::shared_ptr<const group_context> group;
  std::vector<replica_actor> others;  // replicas 1.. of this process
  uint64_t steps = 0;
  uint64_t aggregations = 0;
  accumulation window;  // replica 0's
  std::optional<error> broken;  // a collective failed: the ring fails every later call alike

  int size() const { return static_cast<int>(others.size()) + 1; }

  ~impl() {
    if (sys) stop_and_wait(*sys, others);
  }
};

expected<replica_group> replica_group::start(runtime& rt, nn::model& model, group_options options) {
  if (options.replicas < 1) return make_error(errc::invalid_argument, options.name + ": at least one replica is needed");
  if (!model.compiled()) return make_error(errc::invalid_argument, options.name + ": compile the model before replicating it");
  if (options.bucket_bytes == 0) return make_error(errc::invalid_argument, options.name + ": the bucket size must be positive");
  if (options.accumulation_steps < 1)
    return make_error(errc::invalid_argument, options.name + ": accumulation_steps must be at least 1, not " + std::to_string(options.accumulation_steps));
  auto group = std::make_shared<group_context>();
  group->name = options.name;
  for (int i : model.trainable_indices()) {
    const tensor& w = model.weight_values()[static_cast<std::size_t>(i)];
    if (w.type() != dtype::f32 && w.type() != dtype::f64)
      return make_error(errc::unsupported, options.name + ": weight '" + model.weights()[static_cast<std::size_t>(i)].name + "' is " +
                                               std::string{to_string(w.type())} + "; replicas sum f32 and f64 gradients");
    group->gradient_shapes.push_back(w.shape());
    group->gradient_types.push_back(w.type());
  }
  group->buckets = plan_buckets(group->gradient_shapes, group->gradient_types, options.bucket_bytes);
  const int processes = std::max(1, options.across.processes);
  group->replicas = options.replicas * processes;
  group->processes = processes;
  group->first_rank = options.across.process * options.replicas;
  group->overlap = options.overlap;
  group->accumulation_steps = options.accumulation_steps;
  group->reduce_in_bf16 = options.reduce_in_bf16;
  group->threads = options.threads_per_replica > 0 ? options.threads_per_replica : std::max(1, thread_budget() / options.replicas);
  // Each replica drives its own rank of the ring on its own thread (actors/collective_ring.cpp):
  // scheduled rank actors woke CAF's workers at every step, whose polling took the replicas'
  // cores, and rank actors on threads of their own cost a wake-up at every hand-off.
  AF_TRY_ASSIGN(auto ring, collectives::ring_group::start(rt, {.ranks = group->replicas, .timeout = options.timeout,
                                                               .name = options.name, .across = options.across}));
  group->ring = std::make_shared<collectives::ring_group>(std::move(ring));

  auto state = std::make_unique<impl>();
  state->sys = &rt.system();
  state->model = &model;
  state->group = group;
  for (int r = 1; r < options.replicas; ++r) {
    AF_TRY_ASSIGN(auto copy, model.clone());
    auto held = std::make_shared<nn::model>(std::move(copy));
    state->others.push_back(rt.system().spawn<caf::detached>(replica_behaviour, group->first_rank + r, group->replicas, held,
                                                             std::shared_ptr<const group_context>{group}, rt.cpu_device()));
  }
  return replica_group{std::move(state)};
}

replica_group::replica_group(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
replica_group::replica_group(replica_group&&) noexcept = default;
replica_group& replica_group::operator=(replica_group&&) noexcept = default;
replica_group::~replica_group() = default;

int replica_group::size() const noexcept { return impl_->size(); }
int replica_group::replicas_in_sync() const noexcept { return impl_->group->replicas; }

expected<nn::batch_result> replica_group::train_step(std::vector<batch_slice> slices, uint64_t seed) {
  auto& g = *impl_;
  const int n = g.size();
  const int first = g.group->first_rank;
  if (g.broken) return with_context(*g.broken, g.group->name + ": the group stopped at an earlier step");
  if (static_cast<int>(slices.size()) != g.group->replicas)
    return make_error(errc::invalid_argument, g.group->name + ": " + std::to_string(slices.size()) + " slices for " +
                                                  std::to_string(g.group->replicas) + " replicas");
  std::vector<int64_t> rows;
  int64_t total = 0;
  for (const auto& slice : slices) {
    const auto& in = slice.inputs;
    rows.push_back(in.empty() || in[0].ndim() == 0 ? 0 : in[0].dim(0));
    total += rows.back();
  }
  if (total == 0) return make_error(errc::invalid_argument, g.group->name + ": an empty global batch");
  const uint64_t step = g.steps++;
  const double learning_rate = g.model->learning_rate();
  const auto share = [&](std::size_t r) { return static_cast<double>(rows[r]) / static_cast<double>(total); };

  caf::scoped_actor self{*g.sys};
  using step_handle = decltype(self->request(std::declval<const replica_actor&>(), caf::infinite, replica_step_atom::value,
                                             uint64_t{}, std::vector<tensor>{}, std::vector<tensor>{}, uint64_t{}, double{}, double{}));
  std::vector<step_handle> pending;
  // Rank r draws its dropout masks from seed mixed with r (rank 0: the seed itself), wherever it runs.
  auto seed_of = [&](int rank) { return rank == 0 ? seed : mix_seed(seed, static_cast<uint64_t>(rank)); };
  for (int r = 1; r < n; ++r) {
    auto& slice = slices[static_cast<std::size_t>(first + r)];
    pending.push_back(self->request(g.others[static_cast<std::size_t>(r - 1)], caf::infinite, replica_step_atom::value, step,
                                    std::move(slice.inputs), std::move(slice.targets), seed_of(first + r),
                                    share(static_cast<std::size_t>(first + r)), learning_rate));
  }
  std::vector<expected<nn::batch_result>> results;
  results.reserve(static_cast<std::size_t>(n));
  results.push_back(step_replica(*g.group, *g.model, g.window, first, step, slices[static_cast<std::size_t>(first)], seed_of(first),
                                 share(static_cast<std::size_t>(first)), learning_rate, true));
  for (int r = 1; r < n; ++r) {
    expected<nn::batch_result> got = make_error(errc::cancelled, g.group->name + ": replica " + std::to_string(r) + " did not answer");
    pending[static_cast<std::size_t>(r - 1)].receive(
        [&](double loss, tensor& output_losses, std::vector<tensor>& predictions) {
          nn::batch_result b;
          b.loss = loss;
          b.output_loss = output_losses.to_vector<double>();
          b.predictions = std::move(predictions);
          got = std::move(b);
        },
        [&](caf::error& err) { got = from_caf_error(err); });
    results.push_back(std::move(got));
  }
  // A replica's own failure explains the step best; the others only report that it failed.
  for (auto& r : results)
    if (!r && r.error_value().code != errc::failed_precondition) {
      if (r.error_value().code == errc::timeout || r.error_value().code == errc::cancelled) g.broken = r.error_value();
      return r.error_value();
    }
  for (auto& r : results)
    if (!r) return r.error_value();
  if (g.group->processes > 1) return std::move(*results[0]);  // gathered from every process

  nn::batch_result out;
  std::size_t outputs = 0;
  for (std::size_t r = 0; r < results.size(); ++r) outputs = std::max(outputs, results[r]->predictions.size());
  out.output_loss.assign(outputs, 0.0);
  for (std::size_t r = 0; r < results.size(); ++r) {
    if (rows[r] == 0) continue;
    const double w = share(r);
    out.loss += w * results[r]->loss;
    for (std::size_t i = 0; i < out.output_loss.size(); ++i) out.output_loss[i] += w * results[r]->output_loss[i];
  }
  for (std::size_t i = 0; i < outputs; ++i) {
    std::vector<tensor> parts;
    for (std::size_t r = 0; r < results.size(); ++r)
      if (rows[r] > 0) parts.push_back(results[r]->predictions[i]);
    AF_TRY_ASSIGN(auto joined, concat(parts, 0));
    out.predictions.push_back(std::move(joined));
  }
  return out;
}

expected<void> replica_group::reload_from_model() {
  auto& g = *impl_;
  const auto saved = g.model->state();
  caf::scoped_actor self{*g.sys};
  using load_handle = decltype(self->request(std::declval<const replica_actor&>(), caf::infinite, replica_load_atom::value, saved));
  std::vector<load_handle> pending;
  for (const auto& r : g.others) pending.push_back(self->request(r, caf::infinite, replica_load_atom::value, saved));
  error first;
  for (auto& answer : pending)
    answer.receive([](uint64_t) {}, [&](caf::error& err) {
      if (!first) first = from_caf_error(err);
    });
  if (first) return with_context(first, g.group->name + ": reloading the replicas");
  return {};
}

expected<void> replica_group::aggregate_into_model() {
  auto& g = *impl_;
  const auto& frozen = g.model->non_trainable_indices();
  if (!frozen.empty() && g.group->processes > 1) return aggregate_across_processes();
  if (frozen.empty() || g.others.empty()) return {};
  std::vector<std::vector<tensor>> each{{}};
  for (int i : frozen) each[0].push_back(g.model->weight_values()[static_cast<std::size_t>(i)]);
  caf::scoped_actor self{*g.sys};
  using read_handle = decltype(self->request(std::declval<const replica_actor&>(), caf::infinite, replica_read_atom::value));
  std::vector<read_handle> pending;
  for (const auto& r : g.others) pending.push_back(self->request(r, caf::infinite, replica_read_atom::value));
  error first;
  for (auto& answer : pending)
    answer.receive([&](std::vector<tensor>& values) { each.push_back(std::move(values)); }, [&](caf::error& err) {
      if (!first) first = from_caf_error(err);
    });
  if (first) return with_context(first, g.group->name + ": reading the replicas' moving statistics");
  std::vector<tensor> values = g.model->weight_values();
  for (std::size_t k = 0; k < frozen.size(); ++k) {
    bool same = true;
    for (std::size_t r = 1; r < each.size() && same; ++r)
      same = each[r][k].to_vector<double>() == each[0][k].to_vector<double>();
    if (same) continue;  // a frozen weight: no rounding from averaging equal values
    std::vector<tensor> parts;
    for (auto& r : each) parts.push_back(r[k]);
    AF_TRY_ASSIGN(auto stacked, stack(parts, 0));
    AF_TRY_ASSIGN(auto mean, reduce_mean(stacked, {0}));
    values[static_cast<std::size_t>(frozen[k])] = std::move(mean);
  }
  return g.model->set_weight_values(std::move(values));
}

// Every rank of every process sums its moving statistics; the model takes their mean.
expected<void> replica_group::aggregate_across_processes() {
  auto& g = *impl_;
  const uint64_t id = aggregation_ids + g.aggregations++;
  caf::scoped_actor self{*g.sys};
  using mean_handle = decltype(self->request(std::declval<const replica_actor&>(), caf::infinite, replica_mean_atom::value, uint64_t{}));
  std::vector<mean_handle> pending;
  for (const auto& r : g.others) pending.push_back(self->request(r, caf::infinite, replica_mean_atom::value, id));
  auto sum = sum_non_trainable(*g.group, *g.model, g.group->first_rank, id);
  error first;
  for (auto& answer : pending)
    answer.receive([](uint64_t) {}, [&](caf::error& err) {
      if (!first) first = from_caf_error(err);
    });
  if (!sum) first = sum.error_value();
  if (first) return with_context(first, g.group->name + ": averaging the replicas' moving statistics across processes");
  const auto totals = sum->to_vector<double>();
  std::vector<tensor> values = g.model->weight_values();
  std::size_t at = 0;
  for (int i : g.model->non_trainable_indices()) {
    auto& w = values[static_cast<std::size_t>(i)];
    std::vector<double> mean(totals.begin() + static_cast<std::ptrdiff_t>(at), totals.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::size_t>(w.numel())));
    at += static_cast<std::size_t>(w.numel());
    for (auto& v : mean) v /= g.group->replicas;
    AF_TRY_ASSIGN(auto as_f64, tensor::from_vector(mean).reshape(w.shape()));
    AF_TRY_ASSIGN(w, cast(as_f64, w.type()));
  }
  return g.model->set_weight_values(std::move(values));
}

}  // namespace af::replicas
