#include "apps/serving/warmup_records.hpp"

#include "apps/serving/tensor_proto.hpp"
#include "serialization/saved_model.hpp"
#include "serialization/tfrecord.hpp"
#include "tensorflow_serving/apis/prediction_log.pb.h"

namespace af::serving {

namespace {
// One value of a typed field fills at most this many bytes: a record cannot make the loader
// allocate more than a request body may carry.
constexpr std::size_t max_warmup_broadcast_bytes = std::size_t{64} << 20;
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
      auto value = from_tensor_proto(found->second, spec.name, {.spec = &spec, .max_broadcast_bytes = max_warmup_broadcast_bytes});
      if (!value) {
        error e = with_context(std::move(value).error_value(), context + " (signature '" + signature.name + "')");
        // A dtype or shape that does not fit the signature is a mismatch; anything else is a broken record.
        const bool mismatch = e.code == errc::dtype_mismatch || e.code == errc::unknown_dtype || e.code == errc::shape_mismatch;
        e.code = mismatch ? errc::invalid_argument : errc::malformed_input;
        return e;
      }
      inputs.push_back(std::move(*value));
    }
    requests.push_back(std::move(inputs));
  }
  return requests;
}

}  // namespace af::serving
