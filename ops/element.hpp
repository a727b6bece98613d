#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/tensor.hpp"

namespace af {

/// One named component of an element ("image", "label").
struct named_tensor {
  std::string name;
  tensor value;
};

/// Where an element came from (a record of a file), so that a stage failing on it later (parsing,
/// decoding) can name the file, record and byte offset. Shared file name: copying is cheap.
/// The process's one copy of a file name for element origins. Names are kept for the life of the
/// process (a few bytes per distinct file read), so that an origin holds a plain pointer: a
/// reference count shared by every record of a file made each copy an atomic write on a cache line
/// that bounced between the reading and the consuming cores.
const std::string* intern_origin_file(std::string_view name);

struct element_origin {
  const std::string* file = nullptr;  ///< from intern_origin_file
  int64_t record = -1;  ///< 0-based record index in the file
  int64_t offset = -1;  ///< byte offset of the record's start (in the uncompressed stream)

  bool known() const noexcept { return file != nullptr; }
  /// "file 'a.tfrecord', record 3 at byte offset 1234" (empty when unknown).
  std::string to_string() const {
    if (!file) return {};
    return "file '" + *file + "', record " + std::to_string(record) + " at byte offset " +
           std::to_string(offset);
  }
};

/// What flows through a pipeline: a small ordered struct of named tensors, like a parsed
/// tf.train.Example. Copying shares the tensors' storage.
struct element {
  std::vector<named_tensor> fields;
  /// Provenance for error messages; stays in this process (not sent to remote nodes).
  element_origin origin;

  element() = default;
  element(std::initializer_list<named_tensor> init) : fields(init) {}

  /// The tensor named `name`, or nullptr.
  const tensor* find(std::string_view name) const noexcept {
    for (const auto& f : fields)
      if (f.name == name) return &f.value;
    return nullptr;
  }
  /// Sets (or replaces) the tensor named `name`.
  void set(std::string name, tensor value) {
    for (auto& f : fields)
      if (f.name == name) {
        f.value = std::move(value);
        return;
      }
    fields.push_back({std::move(name), std::move(value)});
  }
  std::size_t size() const noexcept { return fields.size(); }
  /// Payload bytes of all fields (what a slot holding this element costs).
  std::size_t nbytes() const noexcept {
    std::size_t n = 0;
    for (const auto& f : fields) n += f.value.defined() ? f.value.nbytes() : 0;
    return n;
  }
};

}  // namespace af
