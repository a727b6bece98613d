// Field-by-field element operations behind batch, padded_batch, unbatch, from_tensor_slices, zip.

#include "pipeline/element_ops.hpp"

#include <algorithm>
#include <cstring>

namespace af::data {

namespace {

std::string describe(const tensor& t) { return std::string{to_string(t.type())} + " " + to_string(t.shape()); }

// Checks that element `i` has the same field names, in the same order, as the batch's first one.
expected<void> check_fields(const std::vector<element>& items, std::size_t i) {
  const auto& first = items.front().fields;
  const auto& mine = items[i].fields;
  if (mine.size() != first.size())
    return make_error(errc::shape_mismatch, "element " + std::to_string(i) + " of the batch has " +
                                                std::to_string(mine.size()) + " fields, element 0 has " +
                                                std::to_string(first.size()));
  for (std::size_t f = 0; f < first.size(); ++f)
    if (mine[f].name != first[f].name)
      return make_error(errc::shape_mismatch, "element " + std::to_string(i) + " of the batch has field '" +
                                                  mine[f].name + "' where element 0 has '" + first[f].name + "'");
  return {};
}

// Copies a contiguous tensor `src` into the leading corner of the contiguous block `dst` of shape
// `dst_dims` (same rank); the rest of the block was filled with the padding value beforehand.
void copy_padded(const char* src, const shape& src_dims, char* dst, const shape& dst_dims, std::size_t item,
                 std::size_t axis = 0) {
  if (src_dims.empty()) {
    std::memcpy(dst, src, item);
    return;
  }
  std::size_t src_inner = item, dst_inner = item;
  for (std::size_t d = axis + 1; d < src_dims.size(); ++d) {
    src_inner *= static_cast<std::size_t>(src_dims[d]);
    dst_inner *= static_cast<std::size_t>(dst_dims[d]);
  }
  if (axis + 1 == src_dims.size()) {
    std::memcpy(dst, src, src_inner * static_cast<std::size_t>(src_dims[axis]));
    return;
  }
  for (int64_t r = 0; r < src_dims[axis]; ++r)
    copy_padded(src + r * src_inner, src_dims, dst + r * dst_inner, dst_dims, item, axis + 1);
}

}  // namespace

expected<element> stack_elements(const std::vector<element>& items) {
  if (items.empty()) return make_error(errc::invalid_argument, "batch of no elements");
  element out;
  out.origin = items.front().origin;
  const auto n = static_cast<int64_t>(items.size());
  for (std::size_t i = 1; i < items.size(); ++i)
    if (auto ok = check_fields(items, i); !ok) return ok.error_value();
  for (std::size_t f = 0; f < items.front().fields.size(); ++f) {
    const auto& name = items.front().fields[f].name;
    const tensor& first = items.front().fields[f].value;
    shape dims{n};
    dims.insert(dims.end(), first.shape().begin(), first.shape().end());
    auto stacked = tensor::empty(dims, first.type());
    if (!stacked) return stacked.error_value();
    char* dst = static_cast<char*>(stacked->raw_data());
    const std::size_t row = first.nbytes();
    for (std::size_t i = 0; i < items.size(); ++i) {
      const tensor& t = items[i].fields[f].value;
      if (t.type() != first.type())
        return make_error(errc::dtype_mismatch, "field '" + name + "': element " + std::to_string(i) +
                                                    " of the batch is " + describe(t) + ", element 0 is " +
                                                    describe(first));
      if (t.shape() != first.shape())
        return make_error(errc::shape_mismatch, "field '" + name + "': element " + std::to_string(i) +
                                                    " of the batch is " + describe(t) + ", element 0 is " +
                                                    describe(first) + " (padded_batch pads them)");
      auto dense = t.contiguous();
      if (!dense) return dense.error_value();
      if (is_string(t.type())) {  // objects: assigned one by one
        const auto* from = dense->data<std::string>();
        std::copy(from, from + t.numel(), stacked->data<std::string>() + static_cast<int64_t>(i) * t.numel());
        continue;
      }
      std::memcpy(dst + i * row, dense->raw_data(), row);
    }
    out.fields.push_back({name, std::move(*stacked)});
  }
  return out;
}

expected<element> pad_and_stack(const std::vector<element>& items, const padded_shapes& targets, double value) {
  if (items.empty()) return make_error(errc::invalid_argument, "batch of no elements");
  element out;
  out.origin = items.front().origin;
  for (std::size_t i = 1; i < items.size(); ++i)
    if (auto ok = check_fields(items, i); !ok) return ok.error_value();
  for (std::size_t f = 0; f < items.front().fields.size(); ++f) {
    const auto& name = items.front().fields[f].name;
    const tensor& first = items.front().fields[f].value;
    shape extent = first.shape();
    for (std::size_t i = 1; i < items.size(); ++i) {
      const tensor& t = items[i].fields[f].value;
      if (t.type() != first.type() || t.ndim() != first.ndim())
        return make_error(errc::shape_mismatch, "field '" + name + "': element " + std::to_string(i) +
                                                    " of the batch is " + describe(t) + ", element 0 is " +
                                                    describe(first) + " (padding needs one dtype and rank)");
      for (int d = 0; d < t.ndim(); ++d) extent[d] = std::max(extent[d], t.shape()[d]);
    }
    for (const auto& [field, target] : targets) {
      if (field != name) continue;
      if (target.size() != extent.size())
        return make_error(errc::shape_mismatch, "field '" + name + "': padded shape " + to_string(target) +
                                                    " has another rank than the field's " + to_string(extent));
      for (std::size_t d = 0; d < target.size(); ++d) {
        if (target[d] < 0) continue;
        if (target[d] < extent[d])
          return make_error(errc::shape_mismatch, "field '" + name + "': an element has extent " +
                                                      std::to_string(extent[d]) + " in dimension " +
                                                      std::to_string(d) + ", more than the padded shape " +
                                                      to_string(target));
        extent[d] = target[d];
      }
    }
    shape dims{static_cast<int64_t>(items.size())};
    dims.insert(dims.end(), extent.begin(), extent.end());
    auto padded = tensor::full(dims, value, first.type());
    if (!padded) return padded.error_value();
    const std::size_t block = static_cast<std::size_t>(numel(extent)) * size_of(first.type());
    char* dst = static_cast<char*>(padded->raw_data());
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto dense = items[i].fields[f].value.contiguous();
      if (!dense) return dense.error_value();
      if (dense->numel() == 0) continue;
      copy_padded(static_cast<const char*>(dense->raw_data()), dense->shape(), dst + i * block, extent,
                  size_of(first.type()));
    }
    out.fields.push_back({name, std::move(*padded)});
  }
  return out;
}

expected<int64_t> leading_size(const element& columns) {
  if (columns.fields.empty()) return make_error(errc::invalid_argument, "an element without fields has no rows");
  int64_t rows = -1;
  std::string first;
  for (const auto& f : columns.fields) {
    if (f.value.ndim() == 0)
      return make_error(errc::shape_mismatch, "field '" + f.name + "' is a scalar and has no rows to split");
    if (rows < 0) {
      rows = f.value.dim(0);
      first = f.name;
    } else if (f.value.dim(0) != rows) {
      return make_error(errc::shape_mismatch, "field '" + f.name + "' has " + std::to_string(f.value.dim(0)) +
                                                  " rows, field '" + first + "' has " + std::to_string(rows));
    }
  }
  return rows;
}

expected<element> slice_row(const element& columns, int64_t index) {
  element out;
  out.origin = columns.origin;
  out.fields.reserve(columns.fields.size());
  for (const auto& f : columns.fields) {
    auto row = f.value.slice(0, index, index + 1);
    if (!row) return row.error_value();
    shape rest(f.value.shape().begin() + 1, f.value.shape().end());
    auto view = row->reshape(rest);
    if (!view) return view.error_value();
    out.fields.push_back({f.name, std::move(*view)});
  }
  return out;
}

expected<std::vector<element>> unbatch_element(const element& batch) {
  auto rows = leading_size(batch);
  if (!rows) return rows.error_value();
  std::vector<element> out;
  out.reserve(static_cast<std::size_t>(*rows));
  for (int64_t i = 0; i < *rows; ++i) {
    auto row = slice_row(batch, i);
    if (!row) return row.error_value();
    out.push_back(std::move(*row));
  }
  return out;
}

expected<element> merge_fields(std::vector<element>&& parts) {
  element out;
  for (auto& part : parts) {
    if (!out.origin.known()) out.origin = part.origin;
    for (auto& f : part.fields) {
      if (out.find(f.name))
        return make_error(errc::invalid_argument, "zip: two inputs have a field named '" + f.name + "'");
      out.fields.push_back(std::move(f));
    }
  }
  return out;
}

tensor bytes_tensor(std::string_view text) {
  return tensor::from_vector(std::vector<uint8_t>(text.begin(), text.end()));  // no allocator: cannot run out
}

expected<std::string> field_as_string(const element& e, const std::string& field) {
  const tensor* t = e.find(field);
  if (!t) return make_error(errc::invalid_argument, "element has no field '" + field + "'");
  if (t->type() != dtype::u8 || t->ndim() != 1)
    return make_error(errc::dtype_mismatch, "field '" + field + "' is " + describe(*t) + ", wanted u8 bytes");
  auto dense = t->contiguous();
  if (!dense) return dense.error_value();
  return std::string(static_cast<const char*>(dense->raw_data()), static_cast<std::size_t>(dense->numel()));
}

}  // namespace af::data
