#pragma once

// SavedModel: a model as a self-contained directory that a process which never saw the code that
// built it loads, checks and runs (TensorFlow's SavedModel, in our formats).
//
//   DIR/saved_model.afm   the functions (graphs), their signatures and the metadata (Cap'n Proto,
//                         serialization/schema/saved_model.capnp)
//   DIR/variables/        the weights: a checkpoint (index, data, metadata), mapped at load
//   DIR/assets/           files the model needs (vocabularies), copied in at save
//   DIR/MANIFEST          "<sha256>  <path>" per file, as `sha256sum -c` reads it
//
// A signature ("serving_default") names a function, the inputs a caller passes (dims -1: any size,
// the batch) and the outputs; the function's remaining parameters are captures, bound at load to
// the variables of the same names. Loading checks every file against the manifest (the variables'
// bytes against their per-tensor CRC32C before the first call, or at load when asked), decodes the
// graphs against this build's op set, binds the captures and re-optimises each graph for this
// machine. Every problem is an error naming the file and what is wrong; no bytes crash it.
//
//   auto saved = af::saved_model::save(model, "export/digits/1");
//   auto loaded = af::saved_model::load("export/digits/1").value();
//   auto y = loaded.call("serving_default", {images});   // {logits}

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ops/graph/module.hpp"
#include "ops/train/model.hpp"

namespace af::saved_model {

/// The directory format this build writes; it reads this one and older ones.
inline constexpr uint32_t format_version = 1;
/// The signature a model is served under unless told otherwise.
inline constexpr std::string_view default_signature = "serving_default";

struct save_options {
  /// Tags of the graph set ("serve"; "train" when a training step is included).
  std::vector<std::string> tags{"serve"};
  /// Files copied into assets/ (their file names must differ).
  std::vector<std::string> assets;
  /// Replace a directory already at the destination (atomically); otherwise that is an error.
  bool overwrite = false;
};

/// Writes `functions` (with their signatures) and `variables` (every capture of a signature must
/// be one, with its parameter's dtype and shape) as directory `dir`: into a temporary directory
/// next to it, then renamed into place. invalid_argument naming what does not fit, io_error naming
/// the path.
expected<void> save(const graph::module& functions, const std::vector<named_tensor>& variables, const std::string& dir,
                    save_options options = {});
/// The model's inference graph (nn::model::inference_graph) as signature "serving_default", its
/// weights as the variables.
expected<void> save(const nn::model& model, const std::string& dir, save_options options = {});

/// What the directory says about itself.
struct metadata {
  uint32_t format_version = 0;
  uint32_t op_set_version = 0;
  std::string producer;
  int64_t created_unix_seconds = 0;
  std::vector<std::string> tags;
  std::vector<std::string> assets;  ///< paths, under the directory's assets/
};

struct load_options {
  /// Check the variables' bytes against their digests at load (reads them all) rather than
  /// before the first call.
  bool verify_variables_now = false;
  /// Re-optimise the graphs (fusion); false runs them as saved.
  bool optimize = true;
};

class loaded_model {
 public:
  loaded_model(loaded_model&&) noexcept;
  loaded_model& operator=(loaded_model&&) noexcept;
  ~loaded_model();

  const metadata& info() const;
  const std::vector<graph::signature>& signatures() const;
  const graph::signature* find_signature(std::string_view name) const;
  /// The function a signature calls, as saved and as it runs here.
  const graph::graph* saved_graph(std::string_view signature) const;
  const graph::graph* running_graph(std::string_view signature) const;
  /// The variables, as mapped from variables/data (read-only views).
  const std::vector<named_tensor>& variables() const;

  /// Runs signature `name` on `inputs` in its order. Inputs must have the listed dtypes and the
  /// listed dims where they are not -1 (errors name the signature and input). Safe to call from
  /// several threads at once. The first call checks the variables' digests if load did not.
  expected<std::vector<tensor>> call(std::string_view name, const std::vector<tensor>& inputs) const;
  /// The same with inputs and outputs by name (every input of the signature exactly once).
  expected<std::vector<named_tensor>> call(std::string_view name, const std::vector<named_tensor>& inputs) const;
  /// Checks the variables' digests now (once; later calls return the first answer).
  expected<void> verify_variables() const;

  struct impl;
  explicit loaded_model(std::unique_ptr<impl> state);

 private:
  std::unique_ptr<impl> impl_;
};

/// Loads directory `dir` (see the top of this file). Errors: io_error for a missing or unreadable
/// file, malformed_input naming the file for anything corrupt (a digest, a length, a field, a
/// signature that does not match its function, a capture with no variable), unsupported for a
/// newer format or op set or an op this build lacks.
expected<loaded_model> load(const std::string& dir, load_options options = {});

/// SHA-256 of `bytes` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace af::saved_model
