// Element-wise and windowed transformations: map, filter, shuffle, batch, padded_batch, unbatch,
// prefetch, take, skip, shard, enumerate, ignore_errors. Each is one stage actor.

#include <algorithm>
#include <random>
#include <sstream>
#include <thread>

#include "pipeline/node.hpp"
#include "pipeline/state_codec.hpp"

namespace af::data {

namespace {

// -- map and filter -----------------------------------------------------------------------------

// Applies `fn`; an error names the element's origin, or becomes a counted skip (nullopt) below
// ignore_errors. `what` names the function in errors.
expected<std::optional<element>> map_one(const map_fn& fn, const std::string& what, const build_context& ctx,
                                         element input) {
  element_origin origin = input.origin;
  auto made = guarded(what, [&] { return fn(std::move(input)); });
  if (!made) {
    const error err = with_origin(made.error_value(), origin);
    if (!ctx.skip_errors) return err;
    ctx.state->skip(err);
    return std::optional<element>{};
  }
  if (!made->origin.known()) made->origin = origin;
  return std::optional<element>{std::move(*made)};
}

transform_fn guarded_map(map_fn fn, const std::string& name, const build_context& ctx) {
  return [fn = std::move(fn), what = name + " function", ctx](element input) -> expected<std::vector<element>> {
    auto made = map_one(fn, what, ctx, std::move(input));
    if (!made) return made.error_value();
    std::vector<element> out;
    if (*made) out.push_back(std::move(**made));
    return out;
  };
}

class mapped_source final : public element_source {
 public:
  mapped_source(std::unique_ptr<element_source> up, map_fn fn, std::string what, build_context ctx)
      : up_(std::move(up)), fn_(std::move(fn)), what_(std::move(what)), ctx_(std::move(ctx)) {}
  expected<std::optional<element>> next() override {
    for (;;) {
      auto next = up_->next();
      if (!next || !next->has_value()) return next;
      auto made = map_one(fn_, what_, ctx_, std::move(**next));
      if (!made || made->has_value()) return made;
    }
  }
  void save(stage_state& state) const override { up_->save(state); }
  expected<void> restore(const stage_state& state) override { return up_->restore(state); }

 private:
  std::unique_ptr<element_source> up_;
  map_fn fn_;
  std::string what_;
  build_context ctx_;
};

struct map_node final : unary_node {
  map_fn fn;
  int64_t parallelism;
  bool deterministic;
  std::string name;
  map_node(std::shared_ptr<const node> in, map_fn f, int64_t p, bool d, std::string n)
      : unary_node(std::move(in)), fn(std::move(f)), parallelism(p), deterministic(d), name(std::move(n)) {}
  std::string label() const override {
    if (parallelism == 1) return name;
    return name + " (parallelism " + (parallelism == autotune ? std::string{"autotune"} : std::to_string(parallelism)) +
           (deterministic ? ")" : ", unordered)");
  }
  // A sequential map over a source that generates in place is such a source too: it runs where
  // the source runs (in an interleave child, on the thread that read the record, while the record
  // is in its cache); the map holds nothing, the position is the source's.
  source_factory savable_source(const build_context& ctx) const override {
    if (parallelism != 1) return nullptr;
    auto up = input->savable_source(ctx);
    if (!up) return nullptr;
    return [up, f = fn, what = name + " function", ctx] { return std::make_unique<mapped_source>(up(), f, what, ctx); };
  }
  // Consecutive maps with the same parallelism and ordering run as one stage (map fusion): one
  // hop between actors per element instead of one per map.
  pipeline build(const build_context& ctx) const override {
    std::vector<const map_node*> chain{this};
    const node* up = input.get();
    for (auto* m = dynamic_cast<const map_node*>(up); m && m->parallelism == parallelism && m->deterministic == deterministic;
         m = dynamic_cast<const map_node*>(up)) {
      chain.push_back(m);
      up = m->input.get();
    }
    std::reverse(chain.begin(), chain.end());
    std::vector<transform_fn> steps;
    std::string stage = chain.front()->name;
    for (const map_node* m : chain) {
      steps.push_back(guarded_map(m->fn, m->name, ctx));
      if (m != chain.front()) stage += "+" + m->name;
    }
    transform_fn body = steps.size() == 1 ? steps.front() : transform_fn{[steps](element e) -> expected<std::vector<element>> {
      std::vector<element> current;
      current.push_back(std::move(e));
      for (const auto& step : steps) {
        if (current.empty()) break;  // skipped under ignore_errors
        auto next = step(std::move(current.front()));
        if (!next) return next;
        current = std::move(*next);
      }
      return current;
    }};
    pipeline upstream = up->build(ctx);
    if (parallelism == 1) return upstream.transform(stage, std::move(body), {.slots = element_slots});
    std::size_t workers = static_cast<std::size_t>(std::max<int64_t>(1, parallelism));
    if (parallelism == autotune && ctx.tunables) {
      ctx.tunables->add({tunable_stage::knob::parallelism, upstream.stages().size()});
      workers = autotune_initial_workers;
    } else if (parallelism == autotune) {
      workers = std::max(1u, std::thread::hardware_concurrency());
    }
    // Slots for the most workers the tuner may grant, so that growing never starves them.
    const std::size_t most_workers = parallelism == autotune ? std::max(2u, std::thread::hardware_concurrency()) : workers;
    return upstream.parallel_map(stage, std::move(body),
                                 {.parallelism = workers, .deterministic = deterministic,
                                  .slots = std::max(parallel_map_slots, 4 * most_workers)});
  }
  pipeline extend(pipeline up, const build_context&) const override { return up; }
};

struct filter_node final : unary_node {
  predicate_fn keep;
  std::string name;
  filter_node(std::shared_ptr<const node> in, predicate_fn k, std::string n)
      : unary_node(std::move(in)), keep(std::move(k)), name(std::move(n)) {}
  std::string label() const override { return name; }
  pipeline extend(pipeline up, const build_context& ctx) const override {
    return up.transform(name, [keep = keep, name = name, skip = ctx.skip_errors,
                               state = ctx.state](element input) -> expected<std::vector<element>> {
      auto kept = guarded(name + " predicate", [&] { return keep(input); });
      std::vector<element> out;
      if (!kept) {
        const error err = with_origin(kept.error_value(), input.origin);
        if (!skip) return err;
        state->skip(err);
      } else if (*kept) {
        out.push_back(std::move(input));
      }
      return out;
    }, {.slots = element_slots});
  }
};

// -- shuffle ------------------------------------------------------------------------------------

class shuffle_operator final : public stage_operator {
 public:
  shuffle_operator(std::size_t capacity, uint64_t seed) : capacity_(std::max<std::size_t>(1, capacity)), rng_(seed) {
    buffer_.reserve(std::min<std::size_t>(capacity_, 1 << 16));
  }
  expected<void> push(element input, std::vector<element>& out) override {
    if (buffer_.size() < capacity_) {
      buffer_.push_back(std::move(input));
      return {};
    }
    // Full: a uniformly chosen element leaves and the new one takes its place.
    const std::size_t pick = pick_index();
    out.push_back(std::move(buffer_[pick]));
    buffer_[pick] = std::move(input);
    return {};
  }
  expected<void> finish(std::vector<element>& out, std::size_t room) override {
    for (std::size_t k = 0; k < std::max<std::size_t>(1, room) && !buffer_.empty(); ++k) {
      const std::size_t pick = pick_index();
      out.push_back(std::move(buffer_[pick]));
      buffer_[pick] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    return {};
  }
  std::size_t held() const noexcept override { return buffer_.size(); }
  // The buffer's contents in their slots and the generator's state: the picks after a resume are
  // the picks the saved iterator would have made.
  bool save(stage_state& state) const override {
    std::ostringstream rng;
    rng << rng_;
    state_writer{state.data}.bytes(rng.str());
    state.held.assign(buffer_.begin(), buffer_.end());
    return true;
  }
  expected<void> restore(const stage_state& state) override {
    state_reader in{state.data, "stage 'shuffle'"};
    AF_TRY_ASSIGN(std::string rng, in.bytes("random generator"));
    AF_TRY(in.done());
    std::istringstream text{rng};
    text >> rng_;
    if (text.fail()) return make_error(errc::malformed_input, "iterator state of stage 'shuffle': the random generator's state does not parse");
    if (state.held.size() > capacity_)
      return make_error(errc::malformed_input, "iterator state of stage 'shuffle': " + std::to_string(state.held.size()) +
                                                   " elements saved for a buffer of " + std::to_string(capacity_));
    buffer_.assign(state.held.begin(), state.held.end());
    return {};
  }

 private:
  std::size_t pick_index() { return std::uniform_int_distribution<std::size_t>{0, buffer_.size() - 1}(rng_); }
  std::size_t capacity_;
  std::mt19937_64 rng_;
  std::vector<element> buffer_;
};

struct shuffle_node final : unary_node {
  std::size_t buffer;
  std::optional<uint64_t> seed;
  bool reshuffle;
  shuffle_node(std::shared_ptr<const node> in, std::size_t b, std::optional<uint64_t> s, bool r)
      : unary_node(std::move(in)), buffer(b), seed(s), reshuffle(r) {}
  std::string label() const override { return "shuffle(" + std::to_string(buffer) + ")"; }
  pipeline extend(pipeline up, const build_context& ctx) const override {
    // Unseeded: derived from the iteration's base seed, so a saved iterator resumes identically.
    const uint64_t base = seed ? *seed : mix_seed(ctx.state->base_seed, structural_salt(*this));
    const uint64_t effective = reshuffle ? mix_seed(base, ctx.epoch) : base;
    const std::size_t size = buffer;
    return up.apply("shuffle", [size, effective] { return std::make_unique<shuffle_operator>(size, effective); },
                    {.slots = element_slots});
  }
};

// -- batch, padded_batch, unbatch ----------------------------------------------------------------

class batch_operator final : public stage_operator {
 public:
  batch_operator(std::size_t size, bool drop_remainder, std::optional<padded_shapes> padding, double pad_value)
      : size_(std::max<std::size_t>(1, size)), drop_remainder_(drop_remainder), padding_(std::move(padding)),
        pad_value_(pad_value) {
    pending_.reserve(size_);
  }
  expected<void> push(element input, std::vector<element>& out) override {
    pending_.push_back(std::move(input));
    if (pending_.size() < size_) return {};
    return emit(out);
  }
  expected<void> finish(std::vector<element>& out, std::size_t) override {
    if (pending_.empty()) return {};
    if (drop_remainder_) {
      pending_.clear();
      return {};
    }
    return emit(out);
  }
  std::size_t held() const noexcept override { return pending_.size(); }
  bool save(stage_state& state) const override {
    state.held.assign(pending_.begin(), pending_.end());
    return true;
  }
  expected<void> restore(const stage_state& state) override {
    if (!state.data.empty() || state.held.size() >= size_)
      return make_error(errc::malformed_input, "iterator state of stage 'batch': " + std::to_string(state.held.size()) +
                                                   " pending elements for batches of " + std::to_string(size_));
    pending_.assign(state.held.begin(), state.held.end());
    return {};
  }

 private:
  expected<void> emit(std::vector<element>& out) {
    auto made = padding_ ? pad_and_stack(pending_, *padding_, pad_value_) : stack_elements(pending_);
    const element_origin origin = pending_.front().origin;
    pending_.clear();
    if (!made) return with_origin(made.error_value(), origin);
    out.push_back(std::move(*made));
    return {};
  }
  std::size_t size_;
  bool drop_remainder_;
  std::optional<padded_shapes> padding_;
  double pad_value_;
  std::vector<element> pending_;
};

struct batch_node final : unary_node {
  std::size_t size;
  bool drop_remainder;
  std::optional<padded_shapes> padding;
  double pad_value;
  batch_node(std::shared_ptr<const node> in, std::size_t n, bool drop, std::optional<padded_shapes> pad, double v)
      : unary_node(std::move(in)), size(n), drop_remainder(drop), padding(std::move(pad)), pad_value(v) {}
  std::string label() const override {
    return std::string{padding ? "padded_batch(" : "batch("} + std::to_string(size) +
           (drop_remainder ? ", drop_remainder)" : ")");
  }
  pipeline extend(pipeline up, const build_context&) const override {
    return up.apply(padding ? "padded_batch" : "batch", [n = size, d = drop_remainder, p = padding, v = pad_value] {
      return std::make_unique<batch_operator>(n, d, p, v);
    }, {.slots = batch_slots, .input_slots = element_slots});
  }
};

struct unbatch_node final : unary_node {
  using unary_node::unary_node;
  std::string label() const override { return "unbatch"; }
  pipeline extend(pipeline up, const build_context&) const override {
    return up.transform("unbatch", [](element batch) -> expected<std::vector<element>> {
      auto rows = unbatch_element(batch);
      if (!rows) return with_origin(rows.error_value(), batch.origin);
      return rows;
    }, {.slots = element_slots});
  }
};

// -- prefetch, take, skip, shard, enumerate -------------------------------------------------------

struct prefetch_node final : unary_node {
  int64_t buffer;
  prefetch_node(std::shared_ptr<const node> in, int64_t b) : unary_node(std::move(in)), buffer(b) {}
  std::string label() const override {
    return "prefetch(" + (buffer == autotune ? std::string{"autotune"} : std::to_string(buffer)) + ")";
  }
  pipeline extend(pipeline up, const build_context& ctx) const override {
    std::size_t slots = buffer == autotune ? autotune_initial_prefetch : static_cast<std::size_t>(std::max<int64_t>(1, buffer));
    if (buffer == autotune && ctx.tunables) ctx.tunables->add({tunable_stage::knob::prefetch, up.stages().size()});
    return up.transform(
        "prefetch",
        [](element e) -> expected<std::vector<element>> {
          std::vector<element> out;
          out.push_back(std::move(e));
          return out;
        },
        {.slots = slots});
  }
};

// Keeps elements whose position passes `keep(position)`; stops upstream once `done(position)`.
class counting_operator final : public stage_operator {
 public:
  counting_operator(int64_t limit_take, int64_t skip_first, int64_t shards, int64_t shard_index)
      : take_(limit_take), skip_(skip_first), shards_(shards), index_(shard_index) {}
  expected<void> push(element input, std::vector<element>& out) override {
    const int64_t pos = seen_++;
    if (pos < skip_) return {};
    if (shards_ > 1 && (pos - skip_) % shards_ != index_) return {};
    if (take_ >= 0 && kept_ >= take_) return {};
    ++kept_;
    out.push_back(std::move(input));
    return {};
  }
  bool satisfied() const noexcept override { return take_ >= 0 && kept_ >= take_; }
  bool save(stage_state& state) const override {
    state_writer out{state.data};
    out.i64(seen_);
    out.i64(kept_);
    return true;
  }
  expected<void> restore(const stage_state& state) override {
    state_reader in{state.data, "stage '" + state.stage + "'"};
    AF_TRY_ASSIGN(seen_, in.i64("elements seen"));
    AF_TRY_ASSIGN(kept_, in.i64("elements kept"));
    return in.done();
  }

 private:
  int64_t take_, skip_, shards_, index_;
  int64_t seen_ = 0;
  int64_t kept_ = 0;
};

struct counting_node final : unary_node {
  std::string name;
  int64_t take, skip, shards, index;
  counting_node(std::shared_ptr<const node> in, std::string n, int64_t t, int64_t s, int64_t k, int64_t i)
      : unary_node(std::move(in)), name(std::move(n)), take(t), skip(s), shards(k), index(i) {}
  std::string label() const override { return name; }
  pipeline extend(pipeline up, const build_context&) const override {
    const std::string stage = name.substr(0, name.find('('));
    return up.apply(stage, [t = take, s = skip, k = shards, i = index] {
      return std::make_unique<counting_operator>(t, s, k, i);
    }, {.slots = element_slots});
  }
};

class enumerate_operator final : public stage_operator {
 public:
  enumerate_operator(int64_t start, std::string field) : next_(start), field_(std::move(field)) {}
  expected<void> push(element input, std::vector<element>& out) override {
    input.set(field_, tensor::scalar<int64_t>(next_++));
    out.push_back(std::move(input));
    return {};
  }
  bool save(stage_state& state) const override {
    state_writer{state.data}.i64(next_);
    return true;
  }
  expected<void> restore(const stage_state& state) override {
    state_reader in{state.data, "stage 'enumerate'"};
    AF_TRY_ASSIGN(next_, in.i64("next index"));
    return in.done();
  }

 private:
  int64_t next_;
  std::string field_;
};

struct enumerate_node final : unary_node {
  int64_t start;
  std::string field;
  enumerate_node(std::shared_ptr<const node> in, int64_t s, std::string f)
      : unary_node(std::move(in)), start(s), field(std::move(f)) {}
  std::string label() const override { return "enumerate"; }
  pipeline extend(pipeline up, const build_context&) const override {
    return up.apply("enumerate", [s = start, f = field] { return std::make_unique<enumerate_operator>(s, f); },
                    {.slots = element_slots});
  }
};

struct ignore_errors_node final : unary_node {
  using unary_node::unary_node;
  std::string label() const override { return "ignore_errors"; }
  pipeline build(const build_context& ctx) const override {
    build_context lenient = ctx;
    lenient.skip_errors = true;
    return input->build(lenient);
  }
  pipeline extend(pipeline up, const build_context&) const override { return up; }
};

}  // namespace

dataset dataset::map(map_fn fn, int64_t parallelism, bool deterministic, std::string name) const {
  return dataset{std::make_shared<map_node>(root_, std::move(fn), parallelism, deterministic, std::move(name))};
}
dataset dataset::filter(predicate_fn keep, std::string name) const {
  return dataset{std::make_shared<filter_node>(root_, std::move(keep), std::move(name))};
}
dataset dataset::shuffle(std::size_t buffer, std::optional<uint64_t> seed, bool reshuffle_each_iteration) const {
  return dataset{std::make_shared<shuffle_node>(root_, buffer, seed, reshuffle_each_iteration)};
}
dataset dataset::batch(std::size_t size, bool drop_remainder) const {
  if (auto fused = root_->batched(size, drop_remainder)) return dataset{std::move(fused)};
  return dataset{std::make_shared<batch_node>(root_, size, drop_remainder, std::nullopt, 0.0)};
}
dataset dataset::padded_batch(std::size_t size, padded_shapes shapes, double padding_value, bool drop_remainder) const {
  return dataset{std::make_shared<batch_node>(root_, size, drop_remainder, std::move(shapes), padding_value)};
}
dataset dataset::unbatch() const { return dataset{std::make_shared<unbatch_node>(root_)}; }
dataset dataset::prefetch(int64_t buffer) const { return dataset{std::make_shared<prefetch_node>(root_, buffer)}; }
dataset dataset::take(int64_t count) const {
  return dataset{std::make_shared<counting_node>(root_, "take(" + std::to_string(count) + ")", count, 0, 1, 0)};
}
dataset dataset::skip(int64_t count) const {
  return dataset{std::make_shared<counting_node>(root_, "skip(" + std::to_string(count) + ")", -1, count, 1, 0)};
}
dataset dataset::shard(int64_t num_shards, int64_t index) const {
  AF_ASSERT(num_shards >= 1 && index >= 0 && index < num_shards);
  return dataset{std::make_shared<counting_node>(
      root_, "shard(" + std::to_string(num_shards) + ", " + std::to_string(index) + ")", -1, 0, num_shards, index)};
}
dataset dataset::enumerate(int64_t start, std::string field) const {
  return dataset{std::make_shared<enumerate_node>(root_, start, std::move(field))};
}
dataset dataset::ignore_errors() const { return dataset{std::make_shared<ignore_errors_node>(root_)}; }

}  // namespace af::data
