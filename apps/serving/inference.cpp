#include "apps/serving/inference.hpp"

#include <cstring>

#include "apps/serving/element_range.hpp"

namespace af::serving {

namespace {

error invalid(std::string what) { return make_error(errc::invalid_argument, std::move(what)); }


std::size_t value_count(const feature_values& f) {
  switch (f.what) {
    case feature_values::kind::bytes: return f.bytes;
    case feature_values::kind::floats: return f.floats.size();
    case feature_values::kind::ints: return f.ints.size();
    case feature_values::kind::none: break;
  }
  return 0;
}

const feature_values* find_feature(const example_batch& batch, std::size_t row, const std::string& name) {
  if (auto it = batch.examples[row].find(name); it != batch.examples[row].end()) return &it->second;
  if (auto it = batch.context.find(name); it != batch.context.end()) return &it->second;
  return nullptr;
}

// Values per row of `spec`: the product of its dims after the batch; one -1 among them takes its
// size from the first example's count.
expected<int64_t> row_size(const graph::tensor_spec& spec, const example_batch& batch, af::shape& dims) {
  int64_t known = 1;
  int open = -1;
  for (std::size_t d = 1; d < dims.size(); ++d) {
    if (dims[d] == -1) {
      if (open >= 0) return invalid("input '" + spec.name + "' has two open dimensions besides the batch; examples cannot fill it");
      open = static_cast<int>(d);
    } else {
      known *= dims[d];
    }
  }
  if (open < 0) return known;
  const feature_values* first = find_feature(batch, 0, spec.name);
  const auto count = first ? static_cast<int64_t>(value_count(*first)) : 0;
  if (known == 0 || count % known != 0)
    return invalid("example 0: feature '" + spec.name + "' holds " + std::to_string(count) + " values, not a multiple of " +
                   std::to_string(known) + " (input " + to_string(spec.type) + ")");
  dims[static_cast<std::size_t>(open)] = count / known;
  return count;
}

// One row of `spec` from the feature, checked for kind, count and range.
expected<void> fill_row(std::byte* out, const graph::tensor_spec& spec, const feature_values* feature, std::size_t row, int64_t per_row) {
  const std::string where = "example " + std::to_string(row) + ": feature '" + spec.name + "'";
  const dtype type = spec.type.type;
  const bool floating = is_floating(type);
  if (!feature) return invalid(where + " is missing (input " + to_string(spec.type) + " needs " + std::to_string(per_row) + " values)");
  if (feature->what == feature_values::kind::bytes)
    return invalid(where + " holds bytes; input '" + spec.name + "' is " + to_string(spec.type) + " (send a float or int64 list)");
  const auto wanted = floating ? feature_values::kind::floats : feature_values::kind::ints;
  if (feature->what != wanted && !(feature->what == feature_values::kind::none && per_row == 0))
    return invalid(where + " holds " + kind_name(feature->what) + " values; input '" + spec.name + "' is " + to_string(spec.type) +
                   ", which takes " + kind_name(wanted) + " values");
  if (static_cast<int64_t>(value_count(*feature)) != per_row)
    return invalid(where + " holds " + std::to_string(value_count(*feature)) + " values; input " + to_string(spec.type) + " takes " +
                   std::to_string(per_row) + " per example");
  const std::size_t width = size_of(type);
  for (int64_t i = 0; i < per_row; ++i) {
    const auto at = static_cast<std::size_t>(i);
    const bool fits = floating ? store_number_if_fits(out + at * width, type, feature->floats[at])
                               : store_integer_if_fits(out + at * width, type, feature->ints[at]);
    if (!fits) return invalid(where + " value " + std::to_string(i) + " does not fit " + to_string(spec.type));
  }
  return {};
}

// An integer output element as int64 (the classes).
int64_t integer_at(const tensor& t, std::size_t i) {
  switch (t.type()) {
    case dtype::i8: return t.data<int8_t>()[i];
    case dtype::u8: return t.data<uint8_t>()[i];
    case dtype::i32: return t.data<int32_t>()[i];
    case dtype::i64: return t.data<int64_t>()[i];
    default: return 0;
  }
}

const tensor* output_named(const prediction& done, std::string_view name) {
  for (std::size_t i = 0; i < done.signature->outputs.size() && i < done.outputs.size(); ++i)
    if (done.signature->outputs[i].name == name) return &done.outputs[i];
  return nullptr;
}

}  // namespace

const char* kind_name(feature_values::kind k) noexcept {
  switch (k) {
    case feature_values::kind::bytes: return "bytes";
    case feature_values::kind::floats: return "float";
    case feature_values::kind::ints: return "int64";
    case feature_values::kind::none: break;
  }
  return "empty";
}

std::string_view method_name(inference_method method) noexcept {
  return method == inference_method::classify ? graph::classify_method : graph::regress_method;
}

expected<inference_method> parse_method_name(std::string_view name) {
  if (name == graph::classify_method) return inference_method::classify;
  if (name == graph::regress_method) return inference_method::regress;
  return invalid("Unsupported signature method_name: " + std::string{name});
}

expected<void> check_method(const graph::signature& signature, inference_method method) {
  const std::string_view saved = signature.method_name.empty() ? graph::predict_method : std::string_view{signature.method_name};
  if (saved == method_name(method)) return {};
  const char* what = method == inference_method::classify ? "classification" : "regression";
  return invalid(std::string{"Expected "} + what + " signature method_name to be " + std::string{method_name(method)} +
                 ". Was: " + std::string{saved} + " (signature '" + signature.name + "')");
}

expected<std::vector<named_tensor>> inputs_from_examples(const example_batch& batch, const graph::signature& signature) {
  if (batch.examples.empty()) return invalid("Input is empty: the request holds no examples");
  const auto rows = static_cast<int64_t>(batch.examples.size());
  std::vector<named_tensor> inputs;
  inputs.reserve(signature.inputs.size());
  for (const auto& spec : signature.inputs) {
    if (is_string(spec.type.type))
      return invalid("input '" + spec.name + "' is DT_STRING, which examples do not fill (use Predict)");
    af::shape dims = spec.type.dims;
    AF_TRY_ASSIGN(const int64_t per_row, row_size(spec, batch, dims));
    dims[0] = rows;
    // A context feature stands in for every example that lacks it: a small request can declare
    // rows x values far beyond its own size. Bounded before anything is allocated.
    if (per_row > 0 && static_cast<uint64_t>(rows) > max_example_input_bytes / size_of(spec.type.type) / static_cast<uint64_t>(per_row))
      return invalid("input '" + spec.name + "' would be " + std::to_string(rows) + " examples x " + std::to_string(per_row) +
                     " values, over the " + std::to_string(max_example_input_bytes >> 20) + " MiB that examples may fill");
    AF_TRY_ASSIGN(tensor values, tensor::empty(dims, spec.type.type));
    auto* out = static_cast<std::byte*>(values.raw_data());
    const std::size_t row_bytes = static_cast<std::size_t>(per_row) * size_of(spec.type.type);
    for (std::size_t row = 0; row < batch.examples.size(); ++row)
      AF_TRY(fill_row(out + row * row_bytes, spec, find_feature(batch, row, spec.name), row, per_row));
    inputs.push_back({spec.name, std::move(values)});
  }
  return inputs;
}

expected<inference_answer> answer_of(const prediction& done, inference_method method) {
  inference_answer answer{done.model, done.version, done.signature->name, method, {}, {}};
  if (method == inference_method::regress) {
    const tensor* outputs = output_named(done, "outputs");
    if (!outputs || outputs->type() != dtype::f32)
      return make_error(errc::internal, "signature '" + done.signature->name + "' returned no f32 'outputs'");
    const auto n = static_cast<std::size_t>(outputs->numel());
    answer.values.assign(outputs->data<float>(), outputs->data<float>() + n);
    return answer;
  }
  const tensor* scores = output_named(done, "scores");
  const tensor* classes = output_named(done, "classes");
  const tensor* shape_of = scores ? scores : classes;
  if (!shape_of || shape_of->shape().size() != 2 || (scores && scores->type() != dtype::f32) ||
      (scores && classes && scores->shape() != classes->shape()))
    return make_error(errc::internal, "signature '" + done.signature->name + "' returned scores and classes of other shapes");
  const auto rows = static_cast<std::size_t>(shape_of->shape()[0]);
  const auto width = static_cast<std::size_t>(shape_of->shape()[1]);
  answer.classes.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    auto& row = answer.classes[r];
    row.resize(width);
    for (std::size_t c = 0; c < width; ++c) {
      const std::size_t i = r * width + c;
      if (classes) row[c].label = is_string(classes->type()) ? classes->data<std::string>()[i] : std::to_string(integer_at(*classes, i));
      if (scores) row[c].score = scores->data<float>()[i];
    }
  }
  return answer;
}

}  // namespace af::serving
