#pragma once

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

/// What flows through a pipeline: a small ordered struct of named tensors, like a parsed
/// tf.train.Example. Copying shares the tensors' storage.
struct element {
  std::vector<named_tensor> fields;

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
