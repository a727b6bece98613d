// Transformations that run other datasets: repeat (one run per epoch), interleave (one run per
// input element, several at once) and the in-memory cache that serves later epochs. A nested run
// is a child of an interleave stage (child_of): its source in a source stage, or its stages as a
// chain of actors inside the topology, never a blocking reader. Both save their positions with
// the iterator where their inputs can (see actors/interleave_snapshot.cpp).

#include "pipeline/node.hpp"
#include "pipeline/state_codec.hpp"

namespace af::data {

namespace {

// Which passes a repeat runs: numbers `first` .. `first + count - 1` (count < 0: forever), and
// the field that tells each element's pass (empty: none).
struct pass_range {
  int64_t first = 0;
  int64_t count = -1;
  std::string field;
  bool after_last(int64_t pass) const noexcept { return count >= 0 && pass >= first + count; }
};

// Passes of a savable input, one after the other on one source: the state is the pass number
// and the position inside the pass (which the input's own source saves).
class repeat_source final : public element_source {
 public:
  repeat_source(std::shared_ptr<const node> in, pass_range passes, build_context ctx)
      : in_(std::move(in)), range_(std::move(passes)), ctx_(std::move(ctx)), next_pass_(range_.first) {}

  expected<std::optional<element>> next() override {
    while (!ended_) {
      if (!pass_) {
        if (range_.after_last(next_pass_)) break;
        AF_TRY(open_pass(next_pass_++));
        in_this_pass_ = 0;
      }
      auto next = pass_->next();
      if (!next || next->has_value()) {
        if (next) {
          ++in_this_pass_;
          if (!range_.field.empty()) (*next)->set(range_.field, tensor::scalar<int64_t>(next_pass_ - 1));
        }
        return next;
      }
      pass_.reset();
      // An empty pass would make repeat() spin forever: an empty input repeats to empty.
      if (in_this_pass_ == 0) ended_ = true;
    }
    ended_ = true;
    return std::optional<element>{};
  }
  void save(stage_state& state) const override {
    state_writer out{state.data};
    out.i64(next_pass_);
    out.u64(in_this_pass_);
    out.u64(ended_ ? 1 : 0);
    out.u64(pass_ ? 1 : 0);
    if (!pass_) return;
    stage_state inner{state.stage, {}, {}, {}};
    pass_->save(inner);
    out.bytes(inner.data);
    state.held = std::move(inner.held);
  }
  expected<void> restore(const stage_state& state) override {
    state_reader in{state.data, "stage '" + state.stage + "'"};
    AF_TRY_ASSIGN(next_pass_, in.i64("next pass"));
    AF_TRY_ASSIGN(in_this_pass_, in.u64("elements in this pass"));
    AF_TRY_ASSIGN(uint64_t ended, in.u64("ended"));
    AF_TRY_ASSIGN(uint64_t in_pass, in.u64("in a pass"));
    ended_ = ended != 0;
    if (next_pass_ < range_.first || range_.after_last(next_pass_ - 1) || (in_pass && next_pass_ == range_.first))
      return make_error(errc::malformed_input, "iterator state of stage '" + state.stage + "': pass " +
                                                   std::to_string(next_pass_) + " does not fit this repeat");
    if (!in_pass) return in.done();
    stage_state inner{state.stage, {}, state.held, {}};
    AF_TRY_ASSIGN(inner.data, in.bytes("the pass's position"));
    AF_TRY(in.done());
    AF_TRY(open_pass(next_pass_ - 1));
    return pass_->restore(inner);
  }

 private:
  expected<void> open_pass(int64_t pass) {
    build_context ctx = ctx_;
    ctx.epoch = mix_seed(ctx_.epoch, static_cast<uint64_t>(pass));
    auto make = in_->savable_source(ctx);
    if (!make) return make_error(errc::invalid_argument, "repeat: its input stopped generating in place");
    pass_ = make();
    if (!pass_) return make_error(errc::invalid_argument, "repeat: its input made no source");
    return {};
  }

  std::shared_ptr<const node> in_;
  pass_range range_;
  build_context ctx_;
  int64_t next_pass_;  // the pass opened next
  uint64_t in_this_pass_ = 0;
  bool ended_ = false;
  std::unique_ptr<element_source> pass_;
};

constexpr std::size_t passes_slots = 4;

struct repeat_node final : unary_node {
  pass_range passes;
  repeat_node(std::shared_ptr<const node> in, pass_range p) : unary_node(std::move(in)), passes(std::move(p)) {}
  std::string label() const override {
    if (!passes.field.empty())
      return "passes(" + std::to_string(passes.first) + ", " + std::to_string(passes.count) + ", '" + passes.field + "')";
    return passes.count < 0 ? std::string{"repeat"} : "repeat(" + std::to_string(passes.count) + ")";
  }
  // An input that generates in place (a file, a range): every pass runs on this stage's thread.
  source_factory savable_source(const build_context& ctx) const override {
    if (!input->savable_source(ctx)) return nullptr;
    return [in = input, range = passes, ctx] { return std::make_unique<repeat_source>(in, range, ctx); };
  }
  pipeline build(const build_context& ctx) const override {
    if (auto make = savable_source(ctx))
      return pipeline::from_savable_source("repeat", make, {.slots = passes.field.empty() ? element_slots : passes_slots});
    return build_as_children(ctx);
  }

  // Any other input: each pass is a child of an interleave with a cycle of one (a chain of stage
  // actors inside the topology, or a generator's source stage), opened when the previous pass has
  // ended. A snapshot holds the pass number and the pass's own snapshot.
  pipeline build_as_children(const build_context& ctx) const {
    auto inputs = numbered_inputs([in = input, range = passes, ctx](uint64_t pass) -> expected<std::optional<child_source>> {
      if (range.after_last(static_cast<int64_t>(pass))) return std::optional<child_source>{};
      build_context nested = ctx;
      nested.epoch = mix_seed(ctx.epoch, pass);
      return std::optional<child_source>{child_of(*in, nested)};
    }, static_cast<uint64_t>(passes.first));
    // Numbered passes are a trainer's epochs of batches: a few slots, not 64 batches.
    const std::size_t slots = passes.field.empty() ? element_slots : passes_slots;
    return pipeline::interleave("repeat", std::move(inputs),
                                {.cycle_length = 1, .block_length = 1, .open_ahead = 0,
                                 .child_slots = slots, .end_on_empty_child = true, .key_field = passes.field},
                                {.slots = slots});
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
    if (auto outer = input->savable_source(ctx)) return build_merging(std::move(outer), ctx);
    return build_sequential(ctx);
  }

  std::size_t open_ahead() const {
    return static_cast<std::size_t>(parallelism == autotune ? 1 : std::max<int64_t>(0, parallelism - cycle_length));
  }
  interleave_options options() const {
    return {.cycle_length = static_cast<std::size_t>(cycle_length),
            .block_length = static_cast<std::size_t>(block_length),
            .open_ahead = open_ahead(),
            .child_slots = element_slots};
  }

  // The input generates in place (file lists, ranges): an interleave stage opens the children and
  // each runs as a source stage of its own, concurrently; a child that generates in place (a file
  // and its per-record maps) runs whole on one scheduler thread. A snapshot holds the input's
  // position and, per open child, the element it was made of.
  pipeline build_merging(source_factory outer_factory, const build_context& ctx) const {
    auto inputs = [outer_factory, make = fn, ctx]() -> child_inputs {
      std::shared_ptr<element_source> outer = outer_factory();
      auto child_for = [make, ctx](const element& e) -> expected<child_source> {
        auto child = guarded("interleave function", [&] { return make(e); });
        if (!child) return with_origin(child.error_value(), e.origin);
        return child_of(*child->root(), ctx);
      };
      child_inputs in;
      in.open = [outer, child_for]() -> expected<std::optional<child_source>> {
        auto next = outer->next();
        if (!next) return next.error_value();
        if (!next->has_value()) return std::optional<child_source>{};
        AF_TRY_ASSIGN(auto child, child_for(**next));
        child.key = std::move(**next);
        return std::optional<child_source>{std::move(child)};
      };
      in.save = [outer](stage_state& state) { outer->save(state); };
      in.restore = [outer](const stage_state& state) { return outer->restore(state); };
      in.reopen = child_for;
      return in;
    };
    return pipeline::interleave("interleave", child_inputs_factory{std::move(inputs)}, options(), {.slots = element_slots});
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
    return pipeline::interleave("interleave", input->build(nested), std::move(maker), options(), {.slots = element_slots});
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

child_inputs_factory numbered_inputs(numbered_child make, uint64_t first) {
  return [make, first] {
    auto opened = std::make_shared<uint64_t>(first);
    child_inputs in;
    in.open = [make, opened]() -> expected<std::optional<child_source>> {
      auto child = make(*opened);
      if (!child || !child->has_value()) return child;
      (*child)->key = element{{"index", tensor::scalar<int64_t>(static_cast<int64_t>(*opened))}};
      ++*opened;
      return child;
    };
    in.save = [opened](stage_state& state) { state_writer{state.data}.u64(*opened); };
    in.restore = [opened](const stage_state& state) -> expected<void> {
      state_reader saved{state.data, "interleave inputs"};
      AF_TRY_ASSIGN(*opened, saved.u64("inputs opened"));
      return saved.done();
    };
    in.reopen = [make](const element& key) -> expected<child_source> {
      const tensor* index = key.find("index");
      if (!index || index->type() != dtype::i64 || index->numel() != 1 || index->data<int64_t>()[0] < 0)
        return make_error(errc::malformed_input, "iterator state: a child's key is not an input number");
      const auto i = static_cast<uint64_t>(index->data<int64_t>()[0]);
      auto child = make(i);
      if (!child) return child.error_value();
      if (!child->has_value())
        return make_error(errc::malformed_input, "iterator state: input " + std::to_string(i) + " does not exist");
      return std::move(**child);
    };
    return in;
  };
}

dataset dataset::repeat(int64_t count) const { return dataset{std::make_shared<repeat_node>(root_, pass_range{0, count, {}})}; }
dataset dataset::passes(int64_t first, int64_t count, std::string pass_field) const {
  return dataset{std::make_shared<repeat_node>(root_, pass_range{std::max<int64_t>(0, first), std::max<int64_t>(0, count),
                                                                 std::move(pass_field)})};
}
dataset dataset::interleave(dataset_fn fn, int64_t cycle_length, int64_t block_length, int64_t parallelism) const {
  return dataset{std::make_shared<interleave_node>(root_, std::move(fn), cycle_length, block_length, parallelism)};
}
dataset dataset::cache() const { return dataset{std::make_shared<memory_cache_node>(root_)}; }

}  // namespace af::data
