// Dataset sources: range, from_tensor_slices, from_generator, list_files, zip.

#include <glob.h>

#include <algorithm>
#include <random>

#include "actors/runtime.hpp"
#include "pipeline/node.hpp"

namespace af::data {

namespace {

struct range_node final : source_node {
  int64_t start, stop, step;
  range_node(int64_t a, int64_t b, int64_t s) : start(a), stop(b), step(s) {}
  std::string label() const override {
    return "range(" + std::to_string(start) + ", " + std::to_string(stop) + ", " + std::to_string(step) + ")";
  }
  std::string stage_name() const override { return "range"; }
  generator_factory inline_source(const build_context&) const override {
    const int64_t a = start, b = stop, s = step;
    return [a, b, s] {
      return generator_fn{[next = a, b, s]() mutable -> expected<std::optional<element>> {
        if (s == 0) return make_error(errc::invalid_argument, "range: step must not be 0");
        if ((s > 0 && next >= b) || (s < 0 && next <= b)) return std::optional<element>{};
        element e{{"value", tensor::scalar<int64_t>(next)}};
        next += s;
        return std::optional<element>{std::move(e)};
      }};
    };
  }
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
  generator_factory inline_source(const build_context&) const override {
    return [cols = columns, per = batch, drop = drop_remainder] {
      return generator_fn{[cols, per, drop, row = int64_t{0}]() mutable -> expected<std::optional<element>> {
        auto rows = leading_size(cols);
        if (!rows) return with_context(rows.error_value(), "from_tensor_slices");
        if (row >= *rows) return std::optional<element>{};
        if (per == 0) {
          auto e = slice_row(cols, row++);
          if (!e) return e.error_value();
          return std::optional<element>{std::move(*e)};
        }
        const int64_t end = std::min(row + per, *rows);
        if (drop && end - row < per) return std::optional<element>{};
        element e;
        e.origin = cols.origin;
        for (const auto& f : cols.fields) {
          auto rows_view = f.value.slice(0, row, end);
          if (!rows_view) return rows_view.error_value();
          e.fields.push_back({f.name, std::move(*rows_view)});
        }
        row = end;
        return std::optional<element>{std::move(e)};
      }};
    };
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

struct list_files_node final : source_node {
  std::string pattern;
  std::optional<uint64_t> seed;
  list_files_node(std::string p, std::optional<uint64_t> s) : pattern(std::move(p)), seed(s) {}
  std::string label() const override { return "list_files('" + pattern + "')"; }
  std::string stage_name() const override { return "list_files"; }
  generator_factory inline_source(const build_context& ctx) const override {
    const std::string pat = pattern;
    const auto order_seed = seed ? std::optional<uint64_t>{mix_seed(*seed, ctx.epoch)} : std::nullopt;
    return [pat, order_seed] {
      auto files = std::make_shared<std::vector<std::string>>();
      auto listed = std::make_shared<bool>(false);
      return generator_fn{[pat, order_seed, files, listed, i = std::size_t{0}]() mutable
                          -> expected<std::optional<element>> {
        if (!*listed) {
          *listed = true;
          glob_t found{};
          const int rc = ::glob(pat.c_str(), 0, nullptr, &found);
          for (std::size_t k = 0; rc == 0 && k < found.gl_pathc; ++k) files->emplace_back(found.gl_pathv[k]);
          ::globfree(&found);
          if (files->empty())
            return make_error(errc::io_error, "list_files: no file matches '" + pat + "'");
          std::sort(files->begin(), files->end());
          if (order_seed) std::shuffle(files->begin(), files->end(), std::mt19937_64{*order_seed});
        }
        if (i >= files->size()) return std::optional<element>{};
        return std::optional<element>{element{{"filename", bytes_tensor((*files)[i++])}}};
      }};
    };
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
    auto parts_copy = parts;
    auto opener = [parts_copy, ctx]() -> child_opener {
      auto opened = std::make_shared<std::size_t>(0);
      return [parts_copy, ctx, opened]() -> expected<std::optional<child_source>> {
        if (parts_copy.empty()) return make_error(errc::invalid_argument, "zip of no datasets");
        if (*opened >= parts_copy.size()) return std::optional<child_source>{};
        return std::optional<child_source>{child_of(*parts_copy[(*opened)++], ctx)};
      };
    };
    return pipeline::interleave("zip", opener,
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
  if (auto make = n.inline_source(ctx)) return child_source{make(), false};
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
