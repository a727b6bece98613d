#include "apps/serving/example_proto.hpp"

#include "tensorflow_serving/apis/classification.pb.h"
#include "tensorflow_serving/apis/input.pb.h"
#include "tensorflow_serving/apis/model.pb.h"
#include "tensorflow_serving/apis/regression.pb.h"

namespace af::serving {

namespace {

feature_values values_of(const tensorflow::Feature& proto) {
  feature_values out;
  switch (proto.kind_case()) {
    case tensorflow::Feature::kBytesList:
      out.what = feature_values::kind::bytes;
      out.bytes = static_cast<std::size_t>(proto.bytes_list().value_size());
      break;
    case tensorflow::Feature::kFloatList:
      out.what = feature_values::kind::floats;
      out.floats.assign(proto.float_list().value().begin(), proto.float_list().value().end());
      break;
    case tensorflow::Feature::kInt64List:
      out.what = feature_values::kind::ints;
      out.ints.assign(proto.int64_list().value().begin(), proto.int64_list().value().end());
      break;
    case tensorflow::Feature::KIND_NOT_SET: break;
  }
  return out;
}

example example_of(const tensorflow::Example& proto) {
  example out;
  for (const auto& [name, feature] : proto.features().feature()) out.emplace(name, values_of(feature));
  return out;
}

}  // namespace

expected<example_batch> examples_from_input(const tensorflow::serving::Input& input) {
  example_batch out;
  const google::protobuf::RepeatedPtrField<tensorflow::Example>* examples = nullptr;
  switch (input.kind_case()) {
    case tensorflow::serving::Input::kExampleList: examples = &input.example_list().examples(); break;
    case tensorflow::serving::Input::kExampleListWithContext:
      examples = &input.example_list_with_context().examples();
      out.context = example_of(input.example_list_with_context().context());
      break;
    case tensorflow::serving::Input::KIND_NOT_SET: break;
  }
  if (!examples || examples->empty()) return make_error(errc::invalid_argument, "Input is empty: the request holds no examples");
  out.examples.reserve(static_cast<std::size_t>(examples->size()));
  for (const auto& one : *examples) out.examples.push_back(example_of(one));
  return out;
}

void to_proto(const inference_answer& answer, tensorflow::serving::ClassificationResult& out) {
  for (const auto& row : answer.classes) {
    auto* classes = out.add_classifications();
    for (const auto& c : row) {
      auto* one = classes->add_classes();
      one->set_label(c.label);
      one->set_score(c.score);
    }
  }
}

void to_proto(const inference_answer& answer, tensorflow::serving::RegressionResult& out) {
  for (float v : answer.values) out.add_regressions()->set_value(v);
}

void to_proto(const inference_answer& answer, tensorflow::serving::ModelSpec& out) {
  out.set_name(answer.model);
  out.mutable_version()->set_value(answer.version);
  out.set_signature_name(answer.signature_name);
}

}  // namespace af::serving
