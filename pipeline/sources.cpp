// Dataset sources: range, from_tensor_slices, from_generator, list_files, zip.

#include <glob.h>

#include <algorithm>
#include <random>

#include "actors/runtime.hpp"
#include "pipeline/node.hpp"
#include "pipeline/state_codec.hpp"

namespace af::data {

namespace {

class range_source final : public element_source {
 public:
  range_source(int64_t start, int64_t stop, int64_t step) : next_(start), stop_(stop), step_(step) {}
  expected<std::optional<element>> next() override {
    if (step_ == 0) return make_error(errc::invalid_argument, "range: step must not be 0");
    if ((step_ > 0 && next_ >= stop_) || (step_ < 0 && next_ <= stop_)) return std::optional<element>{};
    element e{{"value", tensor::scalar<int64_t>(next_)}};
    next_ += step_;
    return std::optional<element>{std::move(e)};
  }
  void save(stage_state& state) const override { state_writer{state.data}.i64(next_); }
  expected<void> restore(const stage_state& state) override {
    state_reader in{state.data, "range"};
    AF_TRY_ASSIGN(next_, in.i64("next value"));
    return in.done();
  }

 private:
  int64_t next_, stop_, step_;
};

struct range_node final : source_node {
  int64_t start, stop, step;
  range_node(int64_t a, int64_t b, int64_t s) : start(a), stop(b), step(s) {}
  std::string label() const override {
    return "range(" + std::to_string(start) + ", " + std::to_string(stop) + ", " + std::to_string(step) + ")";
  }
  std::string stage_name() const override { return "range"; }
  source_factory savable_source(const build_context&) const override {
    return [a = start, b = stop, s = step] { return std::make_unique<range_source>(a, b, s); };
  }
};

class slices_source final : public element_source {
 public:
  slices_source(element columns, int64_t per, bool drop) : cols_(std::move(columns)), per_(per), drop_(drop) {}
  expected<std::optional<element>> next() override {
    auto rows = leading_size(cols_);
    if (!rows) return with_context(rows.error_value(), "from_tensor_slices");
    if (row_ >= *rows) return std::optional<element>{};
    if (per_ == 0) {
      auto e = slice_row(cols_, row_++);
      if (!e) return e.error_value();
      return std::optional<element>{std::move(*e)};
    }
    const int64_t end = std::min(row_ + per_, *rows);
    if (drop_ && end - row_ < per_) return std::optional<element>{};
    element e;
    e.origin = cols_.origin;
    for (const auto& f : cols_.fields) {
      auto rows_view = f.value.slice(0, row_, end);
      if (!rows_view) return rows_view.error_value();
      e.fields.push_back({f.name, std::move(*rows_view)});
    }
    row_ = end;
    return std::optional<element>{std::move(e)};
  }
  void save(stage_state& state) const override { state_writer{state.data}.i64(row_); }
  expected<void> restore(const stage_state& state) override {
    state_reader in{state.data, "from_tensor_slices"};
    AF_TRY_ASSIGN(row_, in.i64("next row"));
    if (row_ < 0) return make_error(errc::malformed_input, "iterator state of from_tensor_slices: negative row " + std::to_string(row_));
    return in.done();
  }

 private:
  element cols_;
  int64_t per_;
  bool drop_;
  int64_t row_ = 0;
};

/// Rows of in-memory columns: one row per element, or (after a fused batch) `batch` consecutive
/// rows per element as views, with no copy and one message per batch.
struct slices_node final : source_node {
  element columns;
  int64_t batch = 0;  // 0: unbatched
  bool drop_remainder = false;
  explicit slices_node(element c, int64_t b = 0, bool drop = false) : columns(std::move(c)), batch(b), drop_remainder(drop) {}
  std::string label() const override {
    std::string names;
    for (const auto& f : columns.fields) names += (names.empty() ? "" : ", ") + f.name;
    std::string out = "from_tensor_slices(" + names + ")";
    if (batch > 0) out += ".batch(" + std::to_string(batch) + (drop_remainder ? ", drop_remainder" : "") + ")";
    return out;
  }
  std::string stage_name() const override { return batch > 0 ? "from_tensor_slices.batch" : "from_tensor_slices"; }
  std::shared_ptr<const node> batched(std::size_t size, bool drop) const override {
    if (batch > 0 || size == 0) return nullptr;
    return std::make_shared<slices_node>(columns, static_cast<int64_t>(size), drop);
  }
  source_factory savable_source(const build_context&) const override {
    return [cols = columns, per = batch, drop = drop_remainder] { return std::make_unique<slices_source>(cols, per, drop); };
  }
};

struct generator_node final : node {
  std::string name;
  generator_factory make;
  generator_node(std::string n, generator_factory m) : name(std::move(n)), make(std::move(m)) {}
  std::string label() const override { return name; }
  pipeline build(const build_context&) const override {
    // Generators may block (files, sockets): their own thread keeps them off the scheduler.
    return pipeline::from_source(name, make, {.slots = element_slots, .detached = true});
  }
};

// The names matching a glob, listed at the first element; a saved position keeps the list, so a
// resume continues over the same files even when the directory changed meanwhile.
class listed_files_source final : public element_source {
 public:
  listed_files_source(std::string pattern, std::optional<uint64_t> order_seed)
      : pattern_(std::move(pattern)), order_seed_(order_seed) {}
  expected<std::optional<element>> next() override {
    if (!listed_) {
      listed_ = true;
      glob_t found{};
      const int rc = ::glob(pattern_.c_str(), 0, nullptr, &found);
      for (std::size_t k = 0; rc == 0 && k < found.gl_pathc; ++k) files_.emplace_back(found.gl_pathv[k]);
      ::globfree(&found);
      if (files_.empty()) return make_error(errc::io_error, "list_files: no file matches '" + pattern_ + "'");
      std::sort(files_.begin(), files_.end());
      if (order_seed_) std::shuffle(files_.begin(), files_.end(), std::mt19937_64{*order_seed_});
    }
    if (next_ >= files_.size()) return std::optional<element>{};
    return std::optional<element>{element{{"filename", bytes_tensor(files_[next_++])}}};
  }
  void save(stage_state& state) const override {
    state_writer out{state.data};
    out.u64(listed_ ? 1 : 0);
    out.u64(next_);
    out.u64(files_.size());
    for (const auto& f : files_) out.bytes(f);
  }
  expected<void> restore(const stage_state& state) override {
    state_reader in{state.data, "list_files('" + pattern_ + "')"};
    AF_TRY_ASSIGN(uint64_t listed, in.u64("listed"));
    AF_TRY_ASSIGN(uint64_t next, in.u64("next file"));
    AF_TRY_ASSIGN(uint64_t count, in.u64("file count"));
    files_.clear();
    for (uint64_t i = 0; i < count; ++i) {
      AF_TRY_ASSIGN(std::string f, in.bytes("file name"));
      files_.push_back(std::move(f));
    }
    if (next > files_.size())
      return make_error(errc::malformed_input, "iterator state of list_files: file " + std::to_string(next) + " of " + std::to_string(files_.size()));
    listed_ = listed != 0;
    next_ = static_cast<std::size_t>(next);
    return in.done();
  }

 private:
  std::string pattern_;
  std::optional<uint64_t> order_seed_;
  bool listed_ = false;
  std::vector<std::string> files_;
  std::size_t next_ = 0;
};

struct list_files_node final : source_node {
  std::string pattern;
  std::optional<uint64_t> seed;
  list_files_node(std::string p, std::optional<uint64_t> s) : pattern(std::move(p)), seed(s) {}
  std::string label() const override { return "list_files('" + pattern + "')"; }
  std::string stage_name() const override { return "list_files"; }
  source_factory savable_source(const build_context& ctx) const override {
    const auto order_seed = seed ? std::optional<uint64_t>{mix_seed(*seed, ctx.epoch)} : std::nullopt;
    return [pat = pattern, order_seed] { return std::make_unique<listed_files_source>(pat, order_seed); };
  }
};

struct zip_node final : node {
  std::vector<std::shared_ptr<const node>> parts;
  explicit zip_node(std::vector<std::shared_ptr<const node>> p) : parts(std::move(p)) {}
  std::string label() const override { return "zip"; }
  std::vector<const node*> inputs() const override {
    std::vector<const node*> out;
    for (const auto& p : parts) out.push_back(p.get());
    return out;
  }
  // One zip stage reading every input as a child of its own (a source stage, or a chain of
  // stages), so the inputs run concurrently inside the topology.
  pipeline build(const build_context& ctx) const override {
    auto inputs = numbered_inputs([parts = parts, ctx](uint64_t i) -> expected<std::optional<child_source>> {
      if (parts.empty()) return make_error(errc::invalid_argument, "zip of no datasets");
      if (i >= parts.size()) return std::optional<child_source>{};
      return std::optional<child_source>{child_of(*parts[i], ctx)};
    });
    return pipeline::interleave("zip", std::move(inputs),
                                {.cycle_length = std::max<std::size_t>(1, parts.size()),
                                 .block_length = 1,
                                 .open_ahead = 0,
                                 .child_slots = element_slots,
                                 .combine = [](std::vector<element>&& row) { return merge_fields(std::move(row)); }},
                                {.slots = element_slots});
  }
};

}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t salt) noexcept {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (salt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t random_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

uint64_t structural_salt(const node& n) {
  uint64_t depth = 0;
  for (auto ups = n.inputs(); !ups.empty(); ups = ups.front()->inputs()) ++depth;
  return std::hash<std::string>{}(n.label()) ^ mix_seed(depth, 0);
}

child_source child_of(const node& n, const build_context& ctx) {
  if (auto source = n.savable_source(ctx)) return child_source{.source = std::move(source)};
  build_context nested = ctx;
  nested.tunables = nullptr;  // the autotuner sees the top-level topology only
  return child_source{.stages = std::make_shared<const pipeline>(n.build(nested))};
}

dataset dataset::range(int64_t start, int64_t stop, int64_t step) {
  return dataset{std::make_shared<range_node>(start, stop, step)};
}
dataset dataset::from_tensor_slices(element columns) {
  return dataset{std::make_shared<slices_node>(std::move(columns))};
}
dataset dataset::from_generator(std::string name, generator_factory make) {
  return dataset{std::make_shared<generator_node>(std::move(name), std::move(make))};
}
dataset dataset::list_files(std::string pattern, std::optional<uint64_t> shuffle_seed) {
  return dataset{std::make_shared<list_files_node>(std::move(pattern), shuffle_seed)};
}
dataset dataset::zip(std::vector<dataset> inputs) {
  std::vector<std::shared_ptr<const node>> parts;
  for (auto& d : inputs) parts.push_back(d.root());
  return dataset{std::make_shared<zip_node>(std::move(parts))};
}

}  // namespace af::data
