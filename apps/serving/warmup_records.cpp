#include "apps/serving/warmup_records.hpp"

#include "apps/serving/tensor_proto.hpp"
#include "serialization/saved_model.hpp"
#include "serialization/tfrecord.hpp"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace af::serving {

namespace {

// True when `given` fits `spec`: the same rank, and each dimension equal or open (-1).
bool dims_fit(const shape& given, const shape& spec) {
  if (given.size() != spec.size()) return false;
  for (std::size_t d = 0; d < given.size(); ++d)
    if (spec[d] >= 0 && spec[d] != given[d]) return false;
  return true;
}

}  // namespace

// Records that are not predict logs (classify, regress, multi-inference: TF Serving replays those
// through APIs actorflow lacks) are skipped, as are requests for another signature.
expected<std::vector<std::vector<tensor>>> read_warmup_requests(const std::string& path, const graph::signature& signature) {
  AF_TRY_ASSIGN(auto reader, tfrecord_reader::open(path));
  std::vector<std::vector<tensor>> requests;
  tensorflow::serving::PredictionLog log;
  for (;;) {
    AF_TRY_ASSIGN(auto record, reader.next_view());
    if (!record) break;
    const std::string context = path + ": record " + std::to_string(record->index);
    if (!log.ParseFromArray(record->data.data(), static_cast<int>(record->data.size())))
      return make_error(errc::malformed_input, context + " does not parse as a tensorflow.serving.PredictionLog");
    if (!log.has_predict_log()) continue;
    const auto& request = log.predict_log().request();
    const std::string& wanted = request.model_spec().signature_name();
    if (!(wanted == signature.name || (wanted.empty() && signature.name == saved_model::default_signature))) continue;

    for (const auto& [name, proto] : request.inputs()) {
      bool known = false;
      for (const auto& spec : signature.inputs) known = known || spec.name == name;
      if (!known)
        return make_error(errc::invalid_argument, context + ": signature '" + signature.name + "' has no input '" + name + "'");
    }
    std::vector<tensor> inputs;
    inputs.reserve(signature.inputs.size());
    for (const auto& spec : signature.inputs) {
      auto found = request.inputs().find(spec.name);
      if (found == request.inputs().end())
        return make_error(errc::malformed_input, context + ": the request lacks input '" + spec.name + "' of signature '" +
                                                     signature.name + "'");
      auto value = from_tensor_proto(found->second, spec.name);
      if (!value) {
        error e = with_context(std::move(value).error_value(), context);
        // A dtype actorflow lacks does not fit the signature; anything else is a broken record.
        e.code = e.code == errc::dtype_mismatch || e.code == errc::unknown_dtype ? errc::invalid_argument : errc::malformed_input;
        return e;
      }
      if (value->type() != spec.type.type || !dims_fit(value->shape(), spec.type.dims))
        return make_error(errc::invalid_argument, context + ": input '" + spec.name + "' is " +
                                                      std::string{to_string(value->type())} + to_string(value->shape()) +
                                                      " but signature '" + signature.name + "' takes " + to_string(spec.type));
      inputs.push_back(std::move(*value));
    }
    requests.push_back(std::move(inputs));
  }
  return requests;
}

}  // namespace af::serving
