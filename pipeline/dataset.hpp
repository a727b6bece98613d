#pragma once

// af::data::dataset: the tf.data of actorflow. A dataset is an immutable description (cheap to copy,
// prints itself with to_dot()); iterating it launches one stage actor per transformation, joined by
// the credit protocol, so every stage runs concurrently and the whole pipeline holds at most the
// sum of its slots (plus the buffers a description asks for: shuffle, batch, cache).
//
//   auto ds = af::data::dataset::list_files("data/train-*.tfrecord")
//                 .interleave([](const af::element& f) { return af::data::dataset::from_tfrecord(f); }, 4)
//                 .map(parse, af::data::autotune)
//                 .shuffle(10000, 42)
//                 .batch(256)
//                 .prefetch(af::data::autotune);
//   for (auto& batch : ds.iterate(rt)) train_step(batch);

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/stage.hpp"
#include "ops/element.hpp"
#include "ops/error.hpp"
#include "pipeline/element_ops.hpp"

namespace af {
class runtime;
}

namespace af::data {

/// Pass as a parallelism or buffer size to let the autotuner choose (tf.data.AUTOTUNE).
inline constexpr int64_t autotune = -1;

/// Maps an element to an element (may change, add or drop fields). Errors and exceptions fail the
/// stream with the element's origin named, or skip the element under ignore_errors().
using map_fn = std::function<expected<element>(element)>;
/// Keeps an element when it returns true.
using predicate_fn = std::function<expected<bool>(const element&)>;
class dataset;
/// The dataset an interleave reads for one input element (a file name, usually).
using dataset_fn = std::function<expected<dataset>(const element&)>;

/// Compression of TFRecord files.
enum class compression { none, gzip, zlib, by_extension };

struct tfrecord_options {
  /// by_extension: ".gz" is GZIP, ".zz"/".zlib" is ZLIB, anything else uncompressed.
  compression codec = compression::by_extension;
  /// Checks every record's CRCs (a wrong one is an error naming file, record and offset).
  bool verify_crc = true;
};

struct node;

/// Counters of one iteration that are not per stage.
struct iteration_stats {
  /// Records or elements skipped because of errors (only under ignore_errors()).
  uint64_t skipped_errors = 0;
  /// Text of the first skipped error, for the log.
  std::string first_skipped_error;
};

class iterator;
struct iterator_state;

/// Limits for the autotuner, which runs while an iteration has any autotune parameter: it sets
/// map parallelism and prefetch depth from each stage's measured busy/waiting/blocked time.
struct autotune_options {
  /// Workers all autotuned maps may use together (0: the machine's cores).
  std::size_t cpu_budget = 0;
  /// Bytes autotuned prefetch buffers may hold together (0: half of the machine's RAM).
  std::size_t ram_budget_bytes = 0;
  /// How often it measures and adjusts.
  int64_t period_ms = 50;
};

/// An immutable description of an input pipeline.
class dataset {
 public:
  // -- sources -----------------------------------------------------------------------------------
  /// One element per record: field "record" (u8, the raw bytes), origin set to file/record/offset.
  static dataset from_tfrecord(std::vector<std::string> files, tfrecord_options options = {});
  /// The file named by `file_element`'s "filename" field (u8 bytes), for interleave.
  static dataset from_tfrecord(const element& file_element, tfrecord_options options = {});
  /// Slices every field of `columns` along its first dimension (all must agree on it).
  static dataset from_tensor_slices(element columns);
  /// Field "value" (i64 scalar): start, start + step, ... up to (excluding) stop.
  static dataset range(int64_t start, int64_t stop, int64_t step = 1);
  static dataset range(int64_t stop) { return range(0, stop, 1); }
  /// A generator made afresh for each iteration (and each repeat epoch).
  static dataset from_generator(std::string name, generator_factory make);
  /// Field "filename" (u8 bytes of the path) for every file matching the glob, sorted by name (or
  /// shuffled by `seed`); an error when nothing matches.
  static dataset list_files(std::string pattern, std::optional<uint64_t> shuffle_seed = std::nullopt);
  /// Elements whose fields are the union of the inputs' fields, one from each input; ends with
  /// the shortest input. Two inputs with a field of the same name is an error naming it.
  static dataset zip(std::vector<dataset> inputs);

  // -- transformations ---------------------------------------------------------------------------
  /// `parallelism` > 1 (or autotune) runs the function on that many workers at once; it must then
  /// be thread-safe. Non-deterministic order lets finished elements overtake slow ones.
  dataset map(map_fn fn, int64_t parallelism = 1, bool deterministic = true,
              std::string name = "map") const;
  dataset filter(predicate_fn keep, std::string name = "filter") const;
  /// Uniform shuffling within a window of `buffer` elements. Without a seed, a random one per
  /// iteration; with a seed, reproducible (reshuffled per repeat epoch unless told not to).
  dataset shuffle(std::size_t buffer, std::optional<uint64_t> seed = std::nullopt,
                  bool reshuffle_each_iteration = true) const;
  /// Stacks `size` consecutive elements field by field (shapes must agree: else an error naming
  /// the field and both shapes). The last, smaller batch is kept unless drop_remainder.
  dataset batch(std::size_t size, bool drop_remainder = false) const;
  /// Like batch, padding every field to the largest shape in the batch (or to `padded_shapes`
  /// where given) with `padding_value`.
  dataset padded_batch(std::size_t size, padded_shapes shapes = {}, double padding_value = 0,
                       bool drop_remainder = false) const;
  /// Splits every field along its first dimension into elements (the inverse of batch).
  dataset unbatch() const;
  /// A stage with `buffer` output slots that runs ahead of its consumer.
  dataset prefetch(int64_t buffer = autotune) const;
  /// Keeps the elements of the first full pass in memory and serves later passes (repeat) from it.
  dataset cache() const;
  /// Like cache() but in a file written while the first pass streams (never all in RAM first) and
  /// renamed into place only when the pass completes, so a crashed writer leaves no trusted cache.
  dataset cache(std::string path) const;
  /// Runs the dataset `count` times (-1: forever); shuffles reshuffle per epoch.
  dataset repeat(int64_t count = -1) const;
  /// Passes `first` .. `first + count - 1` over this dataset, one after the other in one topology,
  /// each element carrying its pass number (an int64 scalar) in the field `pass_field`. Pass k
  /// draws the order of repeat()'s k-th pass whichever pass it starts from, so a run resumed at
  /// pass k sees what an uninterrupted one saw. fit runs its epochs this way.
  dataset passes(int64_t first, int64_t count, std::string pass_field) const;
  dataset take(int64_t count) const;
  dataset skip(int64_t count) const;
  /// Every `num_shards`-th element starting at `index` (for data-parallel workers).
  dataset shard(int64_t num_shards, int64_t index) const;
  /// Adds field `field` (i64 scalar): start, start + 1, ...
  dataset enumerate(int64_t start = 0, std::string field = "index") const;
  /// For each element, the dataset `fn` makes of it; `cycle_length` of them are read round-robin,
  /// `block_length` elements at a time. Each runs as its own actors (reads overlap); up to
  /// `parallelism` (at least cycle_length; autotune: cycle_length + 1) are opened ahead.
  dataset interleave(dataset_fn fn, int64_t cycle_length, int64_t block_length = 1,
                     int64_t parallelism = autotune) const;
  /// Skips (and counts) bad records and elements whose map, filter or parse failed, in every
  /// stage before this point, instead of failing the stream.
  dataset ignore_errors() const;

  // -- running -----------------------------------------------------------------------------------
  /// Launches the stages and returns a blocking iterator over the elements.
  iterator iterate(runtime& rt, autotune_options tuning = {}) const;
  /// Launches the stages positioned where `saved` was taken (iterator::save); errors when `saved`
  /// comes from another pipeline.
  expected<iterator> resume(runtime& rt, const iterator_state& saved, autotune_options tuning = {}) const;
  /// Graphviz description, one node per transformation.
  std::string to_dot() const;

  /// The stages this dataset launches as, for a given runtime (used by iterate and by sinks that
  /// attach a trainer directly: launch(rt, ds.to_pipeline(rt), ...)).
  pipeline to_pipeline(runtime& rt) const;

  const std::shared_ptr<const node>& root() const noexcept { return root_; }
  explicit dataset(std::shared_ptr<const node> root) : root_(std::move(root)) {}

 private:
  std::shared_ptr<const node> root_;
};

}  // namespace af::data
