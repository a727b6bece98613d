// Transformations that run other datasets: repeat (one run per epoch), interleave (one run per
// input element, several at once) and the in-memory cache that serves later epochs. A nested run
// is a child of an interleave stage (child_of): its generator in a source stage, or its stages as
// a chain of actors inside the topology, never a blocking reader.

#include "pipeline/node.hpp"

namespace af::data {

namespace {

struct repeat_node final : unary_node {
  int64_t count;
  repeat_node(std::shared_ptr<const node> in, int64_t c) : unary_node(std::move(in)), count(c) {}
  std::string label() const override {
    return count < 0 ? std::string{"repeat"} : "repeat(" + std::to_string(count) + ")";
  }
  pipeline build(const build_context& ctx) const override {
    if (!input->inline_source(ctx)) return build_as_children(ctx);
    // An input that generates in place (a file, a range): each pass runs on this stage's thread.
    auto in = input;
    const int64_t times = count;
    return pipeline::from_source(
        "repeat",
        [in, times, ctx] {
          struct pass_state {
            int64_t epoch = 0;
            uint64_t in_this_epoch = 0;
            generator_fn stream;
          };
          auto st = std::make_shared<pass_state>();
          return generator_fn{[in, times, ctx, st]() -> expected<std::optional<element>> {
            for (;;) {
              if (!st->stream) {
                if (times >= 0 && st->epoch >= times) return std::optional<element>{};
                build_context pass = ctx;
                pass.epoch = mix_seed(ctx.epoch, static_cast<uint64_t>(st->epoch));
                auto make = in->inline_source(pass);
                if (!make) return make_error(errc::invalid_argument, "repeat: its input stopped generating in place");
                st->stream = make();
                st->in_this_epoch = 0;
                ++st->epoch;
              }
              auto next = st->stream();
              if (!next) return next.error_value();
              if (next->has_value()) {
                ++st->in_this_epoch;
                return next;
              }
              st->stream = nullptr;
              // An empty pass would make repeat() spin forever: an empty input repeats to empty.
              if (st->in_this_epoch == 0) return std::optional<element>{};
            }
          }};
        },
        {.slots = element_slots});
  }

  // Any other input: each pass is a chain of stage actors inside the topology, the child of an
  // interleave with a cycle of one, opened when the previous pass has ended.
  pipeline build_as_children(const build_context& ctx) const {
    auto in = input;
    const int64_t times = count;
    auto opener = [in, times, ctx]() -> child_opener {
      auto passes = std::make_shared<int64_t>(0);
      return [in, times, ctx, passes]() -> expected<std::optional<child_source>> {
        if (times >= 0 && *passes >= times) return std::optional<child_source>{};
        build_context pass = ctx;
        pass.epoch = mix_seed(ctx.epoch, static_cast<uint64_t>((*passes)++));
        return std::optional<child_source>{child_of(*in, pass)};
      };
    };
    return pipeline::interleave("repeat", opener,
                                {.cycle_length = 1, .block_length = 1, .open_ahead = 0,
                                 .child_slots = element_slots, .end_on_empty_child = true},
                                {.slots = element_slots});
  }
  pipeline extend(pipeline up, const build_context&) const override { return up; }
};

struct interleave_node final : unary_node {
  dataset_fn fn;
  int64_t cycle_length, block_length, parallelism;
  interleave_node(std::shared_ptr<const node> in, dataset_fn f, int64_t c, int64_t b, int64_t p)
      : unary_node(std::move(in)), fn(std::move(f)), cycle_length(std::max<int64_t>(1, c)),
        block_length(std::max<int64_t>(1, b)), parallelism(p) {}
  std::string label() const override {
    return "interleave(cycle " + std::to_string(cycle_length) + ", block " + std::to_string(block_length) + ")";
  }
  pipeline build(const build_context& ctx) const override {
    if (auto outer = input->inline_source(ctx)) return build_merging(std::move(outer), ctx);
    return build_sequential(ctx);
  }

  std::size_t open_ahead() const {
    return static_cast<std::size_t>(parallelism == autotune ? 1 : std::max<int64_t>(0, parallelism - cycle_length));
  }

  // The input generates in place (file lists, ranges): an interleave stage opens the children and
  // each runs as a source stage of its own, concurrently; a child that is itself an inline chain
  // (a file and its per-record maps) runs whole on one scheduler thread.
  pipeline build_merging(generator_factory outer_factory, const build_context& ctx) const {
    auto make = fn;
    auto opener = [outer_factory, make, ctx]() -> child_opener {
      auto outer = std::make_shared<generator_fn>(outer_factory());
      return [outer, make, ctx]() -> expected<std::optional<child_source>> {
        auto next = (*outer)();
        if (!next) return next.error_value();
        if (!next->has_value()) return std::optional<child_source>{};
        auto child = guarded("interleave function", [&] { return make(**next); });
        if (!child) return with_origin(child.error_value(), (*next)->origin);
        return std::optional<child_source>{child_of(*child->root(), ctx)};
      };
    };
    return pipeline::interleave("interleave", opener,
                                {.cycle_length = static_cast<std::size_t>(cycle_length),
                                 .block_length = static_cast<std::size_t>(block_length),
                                 .open_ahead = open_ahead(),
                                 .child_slots = element_slots},
                                {.slots = element_slots});
  }

  // The input is itself a pipeline of stages: the interleave stage launches it as a chain of its
  // own and makes a child of each of its elements as the cycle needs them.
  pipeline build_sequential(const build_context& ctx) const {
    build_context nested = ctx;
    nested.tunables = nullptr;  // the outer chain is not one of the top-level topology's stages
    auto make = fn;
    child_maker maker = [make, ctx](element outer) -> expected<child_source> {
      auto child = guarded("interleave function", [&] { return make(outer); });
      if (!child) return with_origin(child.error_value(), outer.origin);
      return child_of(*child->root(), ctx);
    };
    return pipeline::interleave("interleave", input->build(nested), std::move(maker),
                                {.cycle_length = static_cast<std::size_t>(cycle_length),
                                 .block_length = static_cast<std::size_t>(block_length),
                                 .open_ahead = open_ahead(),
                                 .child_slots = element_slots},
                                {.slots = element_slots});
  }
  pipeline extend(pipeline up, const build_context&) const override { return up; }
};

// -- cache() in memory --------------------------------------------------------------------------

// The elements of one complete pass, shared by later passes of the same iteration.
struct memory_cache {
  std::mutex mtx;
  std::shared_ptr<const std::vector<element>> complete;
};

// Passes elements through, keeping a copy (tensors share storage: no payload copy); publishes the
// copy only when upstream ended cleanly, so a pass cut short by take() or an error is not trusted.
class cache_writer final : public stage_operator {
 public:
  explicit cache_writer(std::shared_ptr<memory_cache> cache) : cache_(std::move(cache)) {}
  expected<void> push(element input, std::vector<element>& out) override {
    kept_->push_back(input);
    out.push_back(std::move(input));
    return {};
  }
  expected<void> finish(std::vector<element>&, std::size_t) override {
    if (kept_) {
      std::lock_guard<std::mutex> guard{cache_->mtx};
      if (!cache_->complete) cache_->complete = std::move(kept_);
      kept_.reset();
    }
    return {};
  }

 private:
  std::shared_ptr<memory_cache> cache_;
  std::shared_ptr<std::vector<element>> kept_ = std::make_shared<std::vector<element>>();
};

struct memory_cache_node final : unary_node {
  using unary_node::unary_node;
  std::string label() const override { return "cache (memory)"; }
  pipeline build(const build_context& ctx) const override {
    std::shared_ptr<memory_cache> cache;
    {
      std::lock_guard<std::mutex> guard{ctx.state->mtx};
      auto& slot = ctx.state->caches[this];
      if (!slot) slot = std::make_shared<memory_cache>();
      cache = std::static_pointer_cast<memory_cache>(slot);
    }
    std::shared_ptr<const std::vector<element>> ready;
    {
      std::lock_guard<std::mutex> guard{cache->mtx};
      ready = cache->complete;
    }
    if (ready) {
      return pipeline::from_source("cache (memory)", [ready] {
        return generator_fn{[ready, i = std::size_t{0}]() mutable -> expected<std::optional<element>> {
          if (i >= ready->size()) return std::optional<element>{};
          return std::optional<element>{(*ready)[i++]};
        }};
      }, {.slots = element_slots});
    }
    return input->build(ctx).apply("cache (memory)", [cache] { return std::make_unique<cache_writer>(cache); },
                                   {.slots = element_slots});
  }
  pipeline extend(pipeline up, const build_context&) const override { return up; }
};

}  // namespace

dataset dataset::repeat(int64_t count) const { return dataset{std::make_shared<repeat_node>(root_, count)}; }
dataset dataset::interleave(dataset_fn fn, int64_t cycle_length, int64_t block_length, int64_t parallelism) const {
  return dataset{std::make_shared<interleave_node>(root_, std::move(fn), cycle_length, block_length, parallelism)};
}
dataset dataset::cache() const { return dataset{std::make_shared<memory_cache_node>(root_)}; }

}  // namespace af::data
