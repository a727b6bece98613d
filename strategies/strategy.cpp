// The default and mirrored strategies of strategies/strategy.hpp.

#include "strategies/strategy.hpp"

#include <algorithm>
#include <set>

#include "actors/replica.hpp"
#include "ops/train/model.hpp"

namespace af::distribute {

namespace {

class single_replica final : public replica_set {
 public:
  explicit single_replica(nn::model& m) : model_(m) {}
  int replicas() const override { return 1; }
  expected<nn::batch_result> train_on_batch(const std::vector<tensor>& inputs, const std::vector<tensor>& targets,
                                            uint64_t seed) override {
    return model_.train_on_batch(inputs, targets, seed);
  }
  expected<void> reload_from_model() override { return {}; }
  expected<void> sync_into_model() override { return {}; }

 private:
  nn::model& model_;
};

class default_strategy_impl final : public strategy {
 public:
  int replicas_in_sync() const override { return 1; }
  std::string describe() const override { return "default"; }
  expected<std::unique_ptr<replica_set>> start(runtime&, nn::model& model) const override {
    return std::unique_ptr<replica_set>{std::make_unique<single_replica>(model)};
  }
};

class mirrored_replicas final : public replica_set {
 public:
  explicit mirrored_replicas(replicas::replica_group group) : group_(std::move(group)) {}
  int replicas() const override { return group_.replicas_in_sync(); }
  expected<nn::batch_result> train_on_batch(const std::vector<tensor>& inputs, const std::vector<tensor>& targets,
                                            uint64_t seed) override {
    if (inputs.empty() || inputs[0].ndim() == 0)
      return make_error(errc::invalid_argument, "mirrored: the batch has no inputs with a batch dimension");
    const int64_t batch = inputs[0].dim(0);
    const auto rows = split_rows(batch, group_.replicas_in_sync());
    std::vector<replicas::batch_slice> slices(rows.size());
    // Rows [start, stop) of every tensor in `from`, appended to `to`.
    auto take = [&](const std::vector<tensor>& from, int64_t start, int64_t stop, std::vector<tensor>& to) -> expected<void> {
      for (const auto& t : from) {
        if (t.ndim() == 0 || t.dim(0) != batch)
          return make_error(errc::shape_mismatch, "mirrored: every input and target needs the batch's " + std::to_string(batch) +
                                                      " rows along its first axis");
        AF_TRY_ASSIGN(auto part, t.slice(0, start, stop));
        to.push_back(std::move(part));
      }
      return {};
    };
    int64_t start = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      AF_TRY(take(inputs, start, start + rows[r], slices[r].inputs));
      AF_TRY(take(targets, start, start + rows[r], slices[r].targets));
      start += rows[r];
    }
    return group_.train_step(std::move(slices), seed);
  }
  expected<void> reload_from_model() override { return group_.reload_from_model(); }
  expected<void> sync_into_model() override { return group_.aggregate_into_model(); }

 private:
  replicas::replica_group group_;
};

class mirrored_strategy_impl final : public strategy {
 public:
  mirrored_strategy_impl(std::vector<std::string> devices, mirrored_options options)
      : devices_(std::move(devices)), options_(options) {}
  int replicas_in_sync() const override { return static_cast<int>(devices_.size()) * options_.across.processes; }
  std::string describe() const override {
    std::string out = "mirrored(";
    for (std::size_t i = 0; i < devices_.size(); ++i) out += (i ? ", " : "") + devices_[i];
    out += ")";
    // The same in every process: the processes' rings meet under this name.
    if (options_.across.processes > 1) out += " x " + std::to_string(options_.across.processes) + " processes";
    return out;
  }
  expected<std::unique_ptr<replica_set>> start(runtime& rt, nn::model& model) const override {
    AF_TRY_ASSIGN(auto group, replicas::replica_group::start(rt, model, {.replicas = static_cast<int>(devices_.size()),
                                                                         .threads_per_replica = options_.threads_per_replica,
                                                                         .bucket_bytes = options_.bucket_bytes,
                                                                         .overlap = options_.overlap,
                                                                         .accumulation_steps = options_.accumulation_steps,
                                                                         .reduce_in_bf16 = options_.reduce_in_bf16,
                                                                         .timeout = options_.timeout,
                                                                         .name = describe(),
                                                                         .across = options_.across}));
    return std::unique_ptr<replica_set>{std::make_unique<mirrored_replicas>(std::move(group))};
  }

 private:
  std::vector<std::string> devices_;
  mirrored_options options_;
};

bool is_cpu_name(const std::string& d) {
  if (d.size() < 5 || d.compare(0, 4, "cpu:") != 0) return false;
  return std::all_of(d.begin() + 4, d.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::shared_ptr<const strategy> default_strategy() {
  static const auto instance = std::make_shared<const default_strategy_impl>();
  return instance;
}

expected<std::shared_ptr<const strategy>> mirrored_strategy(std::vector<std::string> devices, mirrored_options options) {
  if (devices.empty()) return make_error(errc::invalid_argument, "mirrored_strategy: no devices given (\"cpu:0\", \"cpu:1\", ...)");
  std::set<std::string> seen;
  for (const auto& d : devices) {
    if (d.starts_with("gpu:") || d.starts_with("cuda:"))
      return make_error(errc::unsupported, "mirrored_strategy: device '" + d + "': replicas run on CPUs for now (GPU replicas come with the GPU backend)");
    if (!is_cpu_name(d)) return make_error(errc::invalid_argument, "mirrored_strategy: device '" + d + "' is not a device name like \"cpu:0\"");
    if (!seen.insert(d).second) return make_error(errc::invalid_argument, "mirrored_strategy: device '" + d + "' is named twice");
  }
  if (options.bucket_bytes == 0) return make_error(errc::invalid_argument, "mirrored_strategy: the bucket size must be positive");
  if (options.accumulation_steps < 1)
    return make_error(errc::invalid_argument, "mirrored_strategy: accumulation_steps must be at least 1, not " +
                                                  std::to_string(options.accumulation_steps));
  if (options.across.processes < 1 || options.across.process < 0 || options.across.process >= options.across.processes)
    return make_error(errc::invalid_argument, "mirrored_strategy: process " + std::to_string(options.across.process) + " of " +
                                                  std::to_string(options.across.processes) + " does not exist");
  return std::shared_ptr<const strategy>{std::make_shared<const mirrored_strategy_impl>(std::move(devices), options)};
}

std::vector<int64_t> split_rows(int64_t rows, int replicas) {
  std::vector<int64_t> out(static_cast<std::size_t>(std::max(replicas, 1)), rows / std::max(replicas, 1));
  for (int64_t r = 0; r < rows % std::max(replicas, 1); ++r) ++out[static_cast<std::size_t>(r)];
  return out;
}

}  // namespace af::distribute
