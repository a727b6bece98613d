#pragma once

// Internals of dataset descriptions: each transformation is a node that knows how to append its
// stage(s) to a pipeline. Included by pipeline/*.cpp only.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/stage.hpp"
#include "pipeline/autotune.hpp"
#include "pipeline/dataset.hpp"

namespace af::data {

/// What one iteration of a dataset shares across its stages and its nested runs (repeat epochs,
/// interleave children): error counters and caches being filled or served.
struct iteration_state {
  /// Unseeded shuffles derive their seeds from it; an iterator's saved state records it.
  uint64_t base_seed = 0;
  std::atomic<uint64_t> skipped{0};
  std::mutex mtx;
  std::string first_skipped;
  std::map<const void*, std::shared_ptr<void>> caches;  // keyed by the cache node

  /// Counts an error that ignore_errors() turned into a skip.
  void skip(const error& err) {
    if (skipped.fetch_add(1, std::memory_order_relaxed) == 0) {
      std::lock_guard<std::mutex> guard{mtx};
      first_skipped = err.message;
    }
  }
};

/// Output slots of a dataset stage: enough that one message carries several elements (amortising
/// the hop between actors), few enough that a pipeline of small elements holds little memory.
inline constexpr std::size_t element_slots = 64;
/// Slots of a parallel map stage: each worker may hold a quarter of them, a queue deep enough that
/// it keeps computing while the coordinator waits its turn on a busy scheduler thread.
inline constexpr std::size_t parallel_map_slots = 128;
/// Output slots of a batch stage: a batch is many elements, two of them keep the consumer fed.
inline constexpr std::size_t batch_slots = 2;

/// Everything a node needs to build its stages.
struct build_context {
  runtime* rt = nullptr;
  /// Which pass of the innermost repeat this is (reshuffling shuffles derive their seed from it).
  uint64_t epoch = 0;
  std::shared_ptr<iteration_state> state;
  /// True below an ignore_errors(): failures skip the element or record instead of the stream.
  bool skip_errors = false;
  /// Where autotuned stages of the top-level pipeline register; null while building nested ones
  /// (their autotune parameters take fixed defaults).
  std::shared_ptr<tunable_registry> tunables;
};

struct node {
  virtual ~node() = default;
  /// The stages of this node and everything upstream of it.
  virtual pipeline build(const build_context& ctx) const = 0;
  /// The node's label in to_dot().
  virtual std::string label() const = 0;
  /// Upstream nodes (none for sources; several for zip).
  virtual std::vector<const node*> inputs() const { return {}; }
  /// For nodes cheap enough to run on the thread of the stage that reads them (files, ranges, and
  /// sequential maps or repeats of those): a factory of sources of this node's elements, whose
  /// position is saved with the iterator. A nested run of such a node (an interleave child, a
  /// repeat pass) then costs no actors and no thread hand-off. Null for other nodes.
  virtual source_factory savable_source(const build_context&) const { return nullptr; }
  /// This node followed by batch(size, drop_remainder) as one node, when the node can make whole
  /// batches more cheaply than a batch stage stacking its elements (slices of in-memory columns
  /// are views of consecutive rows); null otherwise.
  virtual std::shared_ptr<const node> batched(std::size_t /*size*/, bool /*drop_remainder*/) const { return nullptr; }
};

/// A source node: its stage runs the source of savable_source().
struct source_node : node {
  pipeline build(const build_context& ctx) const override {
    return pipeline::from_savable_source(stage_name(), savable_source(ctx), source_stage_options());
  }
  source_factory savable_source(const build_context& ctx) const override = 0;
  virtual std::string stage_name() const = 0;
  virtual stage_options source_stage_options() const { return {.slots = element_slots, .detached = false}; }
};

/// A node with one input that appends stages to the input's pipeline.
struct unary_node : node {
  explicit unary_node(std::shared_ptr<const node> in) : input(std::move(in)) {}
  std::shared_ptr<const node> input;
  pipeline build(const build_context& ctx) const override { return extend(input->build(ctx), ctx); }
  virtual pipeline extend(pipeline upstream, const build_context& ctx) const = 0;
  std::vector<const node*> inputs() const override { return {input.get()}; }
};

/// `err` with the element's origin (file, record, offset) put in front when known.
inline error with_origin(const error& err, const element_origin& origin) {
  if (!origin.known()) return err;
  return make_error(err.code, origin.to_string() + ": " + err.message);
}

/// Mixes a seed with an epoch number (splitmix64), so each pass shuffles differently.
uint64_t mix_seed(uint64_t seed, uint64_t salt) noexcept;
/// A seed from the operating system's entropy (each iteration's base seed).
uint64_t random_seed();
/// A number that tells a node apart from the others of its description (its label and how many
/// nodes lie upstream), the same in every process: unseeded shuffles mix it into the base seed.
uint64_t structural_salt(const node& n);

/// The context of a top-level iteration: fresh shared state, unseeded shuffles drawing from
/// `base_seed`, a registry for its autotuned stages.
build_context top_level_context(runtime& rt, uint64_t base_seed);
/// An error unless `saved` was taken from an iteration of `ds`.
expected<void> check_resumable(const dataset& ds, const iterator_state& saved);
/// `ds` positioned after its first `consumed` elements.
dataset positioned_at(const dataset& ds, uint64_t consumed);
/// The stages of `ds` continuing from `saved` (checked with check_resumable): restored from its
/// stages' state, or replayed up to its position when it has none. Its pending elements come
/// before these stages' and are the caller's to hand out.
expected<pipeline> resumed_stages(const dataset& ds, const iterator_state& saved, const build_context& ctx);

/// Inputs of an interleave numbered `first`, `first` + 1, ... (repeat passes, zip inputs): `make(i)`
/// is the i-th child, nullopt after the last; its key is its number. A snapshot saves the next
/// number; a child is made again from its number.
using numbered_child = std::function<expected<std::optional<child_source>>(uint64_t index)>;
child_inputs_factory numbered_inputs(numbered_child make, uint64_t first = 0);

/// A nested dataset as the child of an interleave stage (repeat passes, interleave children, zip
/// inputs): its savable source when it generates in place, else its stages as a chain of actors
/// of their own. Either way it runs inside the topology, with no blocking reader.
child_source child_of(const node& n, const build_context& ctx);

}  // namespace af::data
