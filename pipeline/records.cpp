// TFRecord sources and Example parsing for datasets.

#include "pipeline/records.hpp"

#include <atomic>
#include <utility>

#include "pipeline/node.hpp"
#include "pipeline/state_codec.hpp"
#include "serialization/tfrecord.hpp"

namespace af::data {

namespace {

record_compression codec_for(const std::string& path, compression codec) {
  switch (codec) {
    case compression::none: return record_compression::none;
    case compression::gzip: return record_compression::gzip;
    case compression::zlib: return record_compression::zlib;
    case compression::by_extension: break;
  }
  return compression_from_path(path);
}

// Reads files one after another; every element carries its file, record index and offset. Its
// saved position is the file and the (index, offset) of its next record: a resume seeks there.
class tfrecord_source final : public element_source {
 public:
  tfrecord_source(std::vector<std::string> files, tfrecord_options options, bool skip_errors,
                  std::shared_ptr<iteration_state> state)
      : files_(std::move(files)), options_(options), skip_errors_(skip_errors), state_(std::move(state)) {}

  void save(stage_state& saved) const override {
    state_writer out{saved.data};
    out.u64(next_file_);
    out.u64(reader_ ? 1 : 0);
    const tfrecord_position at = reader_ ? reader_->position() : tfrecord_position{};
    out.u64(at.index);
    out.u64(at.offset);
  }
  expected<void> restore(const stage_state& saved) override {
    state_reader in{saved.data, "tfrecord"};
    AF_TRY_ASSIGN(uint64_t next_file, in.u64("next file"));
    AF_TRY_ASSIGN(uint64_t reading, in.u64("reading"));
    AF_TRY_ASSIGN(resume_at_.index, in.u64("record index"));
    AF_TRY_ASSIGN(resume_at_.offset, in.u64("record offset"));
    AF_TRY(in.done());
    if (next_file > files_.size() || (reading && next_file == 0))
      return make_error(errc::malformed_input, "iterator state of tfrecord: file " + std::to_string(next_file) + " of " +
                                                   std::to_string(files_.size()));
    // Reading a file: reopen it at the saved record when next() asks for one.
    next_file_ = static_cast<std::size_t>(reading ? next_file - 1 : next_file);
    resuming_ = reading != 0;
    return {};
  }

  expected<std::optional<element>> next() override {
    for (;;) {
      if (!reader_) {
        if (next_file_ >= files_.size()) return std::optional<element>{};
        const std::string& path = files_[next_file_++];
        file_ = intern_origin_file(path);
        const tfrecord_reader::options opts{.compression = codec_for(path, options_.codec), .verify_crc = options_.verify_crc};
        auto opened = resuming_ ? tfrecord_reader::open_at(path, resume_at_, opts) : tfrecord_reader::open(path, opts);
        resuming_ = false;
        if (!opened) {
          if (!skip_errors_) return opened.error_value();
          state_->skip(opened.error_value());
          continue;
        }
        reader_.emplace(std::move(*opened));
      }
      auto record = reader_->next_view();
      if (!record) {
        // A reader is stuck after an error (a bad length or CRC loses the framing of what follows):
        // under ignore_errors the rest of this file is skipped as one counted error.
        reader_.reset();
        if (!skip_errors_) return record.error_value();
        state_->skip(record.error_value());
        continue;
      }
      if (!record->has_value()) {
        reader_.reset();
        continue;
      }
      const auto& view = **record;
      element e{{"record", bytes_tensor(view.data)}};
      e.origin = {file_, static_cast<int64_t>(view.index), static_cast<int64_t>(view.offset)};
      return std::optional<element>{std::move(e)};
    }
  }

 private:
  std::vector<std::string> files_;
  tfrecord_options options_;
  bool skip_errors_;
  std::shared_ptr<iteration_state> state_;
  std::size_t next_file_ = 0;
  const std::string* file_ = nullptr;
  std::optional<tfrecord_reader> reader_;
  bool resuming_ = false;  // the next file opened continues at resume_at_
  tfrecord_position resume_at_;
};

struct tfrecord_node final : source_node {
  std::vector<std::string> files;
  tfrecord_options options;
  tfrecord_node(std::vector<std::string> f, tfrecord_options o) : files(std::move(f)), options(o) {}
  std::string label() const override {
    if (files.size() == 1) return "tfrecord('" + files.front() + "')";
    return "tfrecord(" + std::to_string(files.size()) + " files)";
  }
  std::string stage_name() const override { return "tfrecord"; }
  // As a stage of its own, file reads block: its own thread keeps them off the scheduler.
  stage_options source_stage_options() const override { return {.slots = element_slots, .detached = true}; }
  source_factory savable_source(const build_context& ctx) const override {
    return [files = files, options = options, skip = ctx.skip_errors, state = ctx.state] {
      return std::make_unique<tfrecord_source>(files, options, skip, state);
    };
  }
};

// Parsers keep scratch space: each thread keeps its own copy per pool (no lock per record), for
// the few pools it used last.
std::atomic<uint64_t> next_parser_pool_id{1};

class parser_pool {
 public:
  explicit parser_pool(example_parser prototype) : prototype_(std::move(prototype)) {}
  expected<element> parse(std::string_view bytes) const {
    constexpr std::size_t pools_per_thread = 4;
    thread_local std::vector<std::pair<uint64_t, example_parser>> mine;
    for (auto& [id, parser] : mine)
      if (id == id_) return parser.parse(bytes);
    if (mine.size() >= pools_per_thread) mine.erase(mine.begin());
    mine.emplace_back(id_, prototype_);
    return mine.back().second.parse(bytes);
  }

 private:
  const uint64_t id_ = next_parser_pool_id.fetch_add(1, std::memory_order_relaxed);  // never reused
  example_parser prototype_;
};

}  // namespace

dataset dataset::from_tfrecord(std::vector<std::string> files, tfrecord_options options) {
  return dataset{std::make_shared<tfrecord_node>(std::move(files), options)};
}

dataset dataset::from_tfrecord(const element& file_element, tfrecord_options options) {
  auto name = field_as_string(file_element, "filename");
  if (!name) {
    // Not a list_files() element: the stream fails naming why, instead of the process.
    error why = with_context(name.error_value(), "from_tfrecord");
    return from_generator("tfrecord", [why] {
      return generator_fn{[why]() -> expected<std::optional<element>> { return why; }};
    });
  }
  return from_tfrecord(std::vector<std::string>{*name}, options);
}

map_fn parse_example_fn(feature_spec spec, std::string field) {
  auto made = example_parser::make(std::move(spec));
  if (!made) {
    error why = made.error_value();
    return [why](element) -> expected<element> { return why; };
  }
  auto pool = std::make_shared<parser_pool>(std::move(*made));
  return [pool, field = std::move(field)](element e) -> expected<element> {
    const tensor* raw = e.find(field);
    if (!raw || raw->type() != dtype::u8 || raw->ndim() != 1 || !raw->is_contiguous())
      return make_error(errc::invalid_argument, "parse_example: the element has no u8 field '" + field + "'");
    auto parsed = pool->parse({static_cast<const char*>(raw->raw_data()), static_cast<std::size_t>(raw->numel())});
    if (!parsed) return parsed.error_value();
    parsed->origin = std::move(e.origin);
    return parsed;
  };
}

}  // namespace af::data
