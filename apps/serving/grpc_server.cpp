#include "apps/serving/grpc_server.hpp"

#include <absl/synchronization/mutex.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <optional>
#include <set>

#include "apps/serving/bearer_token.hpp"
#include "apps/serving/example_proto.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/request_deadline.hpp"
#include "apps/serving/serving_config.hpp"
#include "apps/serving/tensor_proto.hpp"
#include "serialization/saved_model.hpp"
#include "tensorflow_serving/apis/classification.pb.h"
#include "tensorflow_serving/apis/inference.pb.h"
#include "tensorflow_serving/apis/regression.pb.h"
#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace af::serving {

namespace tfs = tensorflow::serving;

int grpc_status_code(errc code) noexcept {
  switch (code) {
    case errc::none: return grpc::StatusCode::OK;
    case errc::not_found: return grpc::StatusCode::NOT_FOUND;
    case errc::invalid_argument:
    case errc::shape_mismatch:
    case errc::dtype_mismatch:
    case errc::unknown_dtype:
    case errc::malformed_input:
    case errc::out_of_range: return grpc::StatusCode::INVALID_ARGUMENT;
    case errc::resource_exhausted:
    case errc::out_of_memory: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case errc::timeout: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case errc::cancelled: return grpc::StatusCode::CANCELLED;
    case errc::unsupported: return grpc::StatusCode::UNIMPLEMENTED;
    case errc::peer_down: return grpc::StatusCode::UNAVAILABLE;
    case errc::internal: return grpc::StatusCode::INTERNAL;
    case errc::failed_precondition: return grpc::StatusCode::FAILED_PRECONDITION;
    default: return grpc::StatusCode::INTERNAL;
  }
}

namespace {

// The error, as the status a call finishes with.
grpc::Status to_status(const error& e) {
  if (!e) return grpc::Status::OK;
  return {static_cast<grpc::StatusCode>(grpc_status_code(e.code)), e.message.empty() ? std::string{to_string(e.code)} : e.message};
}

grpc::Status invalid(std::string message) { return {grpc::StatusCode::INVALID_ARGUMENT, std::move(message)}; }

// A request's ModelSpec as model_server takes it.
model_spec spec_of(const tfs::ModelSpec& proto) {
  model_spec spec;
  spec.name = proto.name();
  if (proto.has_version()) spec.version = proto.version().value();
  if (proto.version_choice_case() == tfs::ModelSpec::kVersionLabel) spec.version_label = proto.version_label();
  spec.signature_name = proto.signature_name();
  return spec;
}

// The client's deadline on our clock; none when it set none (gRPC reports a far-away time then).
std::optional<clock_type::time_point> deadline_of(const grpc::CallbackServerContext& ctx) {
  const auto deadline = ctx.deadline();
  const auto now = std::chrono::system_clock::now();
  // Compared before subtracting: a deadline at either end of the clock's range would overflow.
  if (deadline <= now) return clock_type::now();
  if (deadline > now + max_request_timeout) return std::nullopt;
  return clock_type::now() + std::chrono::duration_cast<clock_type::duration>(deadline - now);
}

// Whether the call carries the token (when one is configured).
bool authorized(const grpc::CallbackServerContext& ctx, const std::string& token) {
  if (token.empty()) return true;
  const auto& metadata = ctx.client_metadata();
  const auto [first, last] = metadata.equal_range("authorization");
  for (auto it = first; it != last; ++it)
    if (bearer_matches({it->second.data(), it->second.size()}, token)) return true;
  return false;
}

const grpc::Status unauthenticated{grpc::StatusCode::UNAUTHENTICATED, "missing or wrong bearer token (metadata 'authorization: Bearer ...')"};

// The request's inputs against the signature's, by name: TF Serving's messages for an unknown
// or a missing one.
grpc::Status check_input_names(const tfs::PredictRequest& request, const graph::signature& signature) {
  auto expected_names = [&] {
    std::string names;
    for (const auto& spec : signature.inputs) names += (names.empty() ? "" : ",") + spec.name;
    return "{" + names + "}";
  };
  for (const auto& [name, proto] : request.inputs())
    if (std::none_of(signature.inputs.begin(), signature.inputs.end(), [&](const auto& spec) { return spec.name == name; }))
      return invalid("input tensor alias not found in signature: " + name + ". Inputs expected to be in the set " + expected_names() + ".");
  for (const auto& spec : signature.inputs)
    if (!request.inputs().count(spec.name))
      return invalid("input tensor alias missing from the request: " + spec.name + ". Inputs expected to be in the set " +
                     expected_names() + ".");
  return grpc::Status::OK;
}

// TF Serving answers an unnamed model so.
constexpr const char* missing_spec = "Missing ModelSpec";

class prediction_service final : public tfs::PredictionService::CallbackService {
 public:
  prediction_service(model_server& models, const grpc_options& options) : models_(models), options_(options) {}

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* ctx, const tfs::PredictRequest* request,
                                    tfs::PredictResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    if (!authorized(*ctx, options_.bearer_token)) {
      reactor->Finish(unauthenticated);
      return reactor;
    }
    if (!request->has_model_spec() || request->model_spec().name().empty()) {
      reactor->Finish(invalid(missing_spec));
      return reactor;
    }
    // A client that gave up while the call waited for a thread gets no model run.
    if (ctx->IsCancelled()) {
      reactor->Finish(grpc::Status::CANCELLED);
      return reactor;
    }
    // Refused before the tensors are copied out, as the REST front end refuses before it parses.
    const model_spec spec = spec_of(request->model_spec());
    if (auto admitted = models_.admit(spec); !admitted) {
      reactor->Finish(to_status(admitted.error_value()));
      return reactor;
    }
    auto signature = models_.find_signature(spec);
    if (!signature) {
      reactor->Finish(to_status(signature.error_value()));
      return reactor;
    }
    if (auto names = check_input_names(*request, **signature); !names.ok()) {
      reactor->Finish(names);
      return reactor;
    }
    std::vector<named_tensor> inputs;
    inputs.reserve(request->inputs().size());
    for (const auto& input_spec : (*signature)->inputs) {
      auto value = from_tensor_proto(request->inputs().at(input_spec.name), input_spec.name,
                                     {.spec = &input_spec, .max_broadcast_bytes = options_.max_message_bytes});
      if (!value) {
        reactor->Finish(to_status(value.error_value()));
        return reactor;
      }
      inputs.push_back({input_spec.name, std::move(*value)});
    }
    // The request and response live until the reactor is done, that is until Finish below.
    models_.predict_async(spec, std::move(inputs), deadline_of(*ctx),
                          [reactor, request, response](expected<prediction> answer) {
                            reactor->Finish(answer ? respond(*request, *answer, *response) : to_status(answer.error_value()));
                          });
    return reactor;
  }

  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* ctx, const tfs::ClassificationRequest* request,
                                     tfs::ClassificationResponse* response) override {
    return infer(ctx, request->model_spec(), request->has_model_spec(), request->input(), inference_method::classify,
                 [response](const inference_answer& answer) {
                   to_proto(answer, *response->mutable_result());
                   to_proto(answer, *response->mutable_model_spec());
                 });
  }

  grpc::ServerUnaryReactor* Regress(grpc::CallbackServerContext* ctx, const tfs::RegressionRequest* request,
                                    tfs::RegressionResponse* response) override {
    return infer(ctx, request->model_spec(), request->has_model_spec(), request->input(), inference_method::regress,
                 [response](const inference_answer& answer) {
                   to_proto(answer, *response->mutable_result());
                   to_proto(answer, *response->mutable_model_spec());
                 });
  }

  grpc::ServerUnaryReactor* MultiInference(grpc::CallbackServerContext* ctx, const tfs::MultiInferenceRequest* request,
                                           tfs::MultiInferenceResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    if (!authorized(*ctx, options_.bearer_token)) {
      reactor->Finish(unauthenticated);
      return reactor;
    }
    if (request->tasks().empty()) {
      reactor->Finish(invalid("MultiInference: Expected at least one task"));
      return reactor;
    }
    std::vector<inference_task> tasks;
    for (const auto& task : request->tasks()) {
      auto method = parse_method_name(task.method_name());
      if (!method) {
        reactor->Finish(to_status(method.error_value()));
        return reactor;
      }
      tasks.push_back({spec_of(task.model_spec()), *method});
    }
    auto batch = screen(*ctx, request->tasks(0).model_spec(), request->tasks(0).has_model_spec(), request->input());
    if (!batch.ok()) {
      reactor->Finish(batch.status);
      return reactor;
    }
    multi_infer_async(models_, std::move(tasks), std::move(batch.examples), deadline_of(*ctx),
                      [reactor, response](expected<std::vector<inference_answer>> answers) {
                        if (!answers) return reactor->Finish(to_status(answers.error_value()));
                        for (const auto& answer : *answers) {
                          auto* result = response->add_results();
                          to_proto(answer, *result->mutable_model_spec());
                          if (answer.method == inference_method::classify) to_proto(answer, *result->mutable_classification_result());
                          else to_proto(answer, *result->mutable_regression_result());
                        }
                        reactor->Finish(grpc::Status::OK);
                      });
    return reactor;
  }

  grpc::ServerUnaryReactor* GetModelMetadata(grpc::CallbackServerContext* ctx, const tfs::GetModelMetadataRequest* request,
                                             tfs::GetModelMetadataResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(authorized(*ctx, options_.bearer_token) ? metadata(*request, *response) : unauthenticated);
    return reactor;
  }

 private:
  // What every call over examples checks before it runs: the token, a named model, a client still
  // waiting, room in the queue, and the examples themselves.
  struct screened {
    grpc::Status status;
    std::shared_ptr<const example_batch> examples;
    bool ok() const { return status.ok(); }
  };
  screened screen(const grpc::CallbackServerContext& ctx, const tfs::ModelSpec& spec_proto, bool has_spec, const tfs::Input& input) {
    if (!authorized(ctx, options_.bearer_token)) return {unauthenticated, nullptr};
    if (!has_spec || spec_proto.name().empty()) return {invalid(missing_spec), nullptr};
    if (ctx.IsCancelled()) return {grpc::Status::CANCELLED, nullptr};
    if (auto admitted = models_.admit(spec_of(spec_proto)); !admitted) return {to_status(admitted.error_value()), nullptr};
    auto examples = examples_from_input(input);
    if (!examples) return {to_status(examples.error_value()), nullptr};
    return {grpc::Status::OK, std::make_shared<const example_batch>(std::move(*examples))};
  }

  template <typename Fill>
  grpc::ServerUnaryReactor* infer(grpc::CallbackServerContext* ctx, const tfs::ModelSpec& spec_proto, bool has_spec, const tfs::Input& input,
                                  inference_method method, Fill fill) {
    auto* reactor = ctx->DefaultReactor();
    auto batch = screen(*ctx, spec_proto, has_spec, input);
    if (!batch.ok()) {
      reactor->Finish(batch.status);
      return reactor;
    }
    infer_async(models_, spec_of(spec_proto), method, std::move(batch.examples), deadline_of(*ctx),
                [reactor, fill](expected<inference_answer> answer) {
                  if (!answer) return reactor->Finish(to_status(answer.error_value()));
                  fill(*answer);
                  reactor->Finish(grpc::Status::OK);
                });
    return reactor;
  }

  // The outputs the request wants (output_filter, else all) into `response`.
  static grpc::Status respond(const tfs::PredictRequest& request, const prediction& answer, tfs::PredictResponse& response) {
    const auto& outputs = answer.signature->outputs;
    std::vector<bool> wanted(outputs.size(), request.output_filter().empty());
    std::set<std::string_view> seen;
    for (const auto& name : request.output_filter()) {
      if (!seen.insert(name).second) return invalid("duplicate output tensor alias in output_filter: " + name);
      auto it = std::find_if(outputs.begin(), outputs.end(), [&](const auto& spec) { return spec.name == name; });
      if (it == outputs.end())
        return invalid("output tensor alias not found in signature '" + answer.signature->name + "': " + name);
      wanted[static_cast<std::size_t>(it - outputs.begin())] = true;
    }
    auto* spec = response.mutable_model_spec();
    spec->set_name(answer.model);
    spec->mutable_version()->set_value(answer.version);
    spec->set_signature_name(answer.signature->name);
    auto& out = *response.mutable_outputs();
    for (std::size_t i = 0; i < outputs.size() && i < answer.outputs.size(); ++i) {
      if (!wanted[i]) continue;
      if (auto done = to_tensor_proto(answer.outputs[i], out[outputs[i].name]); !done)
        return to_status(with_context(done.error_value(), "output '" + outputs[i].name + "'"));
    }
    return grpc::Status::OK;
  }

  grpc::Status metadata(const tfs::GetModelMetadataRequest& request, tfs::GetModelMetadataResponse& response) const {
    if (!request.has_model_spec() || request.model_spec().name().empty()) return invalid(missing_spec);
    if (request.metadata_field().empty()) return invalid("GetModelMetadataRequest must specify at least one metadata_field");
    for (const auto& field : request.metadata_field())
      if (field != "signature_def") return invalid("Metadata field " + field + " is not supported");
    auto spec = spec_of(request.model_spec());
    spec.signature_name.clear();  // metadata covers every signature of the version
    auto found = models_.signatures(spec);
    if (!found) return to_status(found.error_value());
    const auto& [version, signatures] = *found;

    tfs::SignatureDefMap defs;
    for (const auto& sig : signatures) {
      auto& def = (*defs.mutable_signature_def())[sig.name];
      def.set_method_name(sig.method_name.empty() ? std::string{graph::predict_method} : sig.method_name);
      auto describe = [](const graph::tensor_spec& t, tensorflow::TensorInfo& info) {
        info.set_name(t.name);
        info.set_dtype(static_cast<tensorflow::DataType>(to_tf_dtype(t.type.type)));
        to_shape_proto(t.type.dims, *info.mutable_tensor_shape());
      };
      for (const auto& in : sig.inputs) describe(in, (*def.mutable_inputs())[in.name]);
      for (const auto& out : sig.outputs) describe(out, (*def.mutable_outputs())[out.name]);
    }
    response.mutable_model_spec()->set_name(spec.name);
    response.mutable_model_spec()->mutable_version()->set_value(version);
    (*response.mutable_metadata())["signature_def"].PackFrom(defs);
    return grpc::Status::OK;
  }

  model_server& models_;
  const grpc_options& options_;
};

class model_service final : public tfs::ModelService::CallbackService {
 public:
  model_service(model_server& models, const grpc_options& options) : models_(models), options_(options) {}

  grpc::ServerUnaryReactor* GetModelStatus(grpc::CallbackServerContext* ctx, const tfs::GetModelStatusRequest* request,
                                           tfs::GetModelStatusResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(authorized(*ctx, options_.bearer_token) ? status(*request, *response) : unauthenticated);
    return reactor;
  }

  // The new ModelServerConfig replaces the served list (TF Serving's semantics): it is checked as a
  // --model_config_file is, and the call returns once the models it adds are loaded. It runs on
  // gRPC's thread: loads are rare, and an operator's call may wait for them.
  grpc::ServerUnaryReactor* HandleReloadConfigRequest(grpc::CallbackServerContext* ctx, const tfs::ReloadConfigRequest* request,
                                                      tfs::ReloadConfigResponse* response) override {
    auto* reactor = ctx->DefaultReactor();
    if (!authorized(*ctx, options_.bearer_token)) {
      reactor->Finish(unauthenticated);
      return reactor;
    }
    auto done = [&]() -> expected<void> {
      std::string text;
      if (!google::protobuf::TextFormat::PrintToString(request->config(), &text))
        return make_error(errc::invalid_argument, "ReloadConfigRequest.config cannot be printed as text");
      AF_TRY_ASSIGN(auto models, parse_model_config(text, "ReloadConfigRequest.config"));
      return models_.reconfigure(std::move(models));
    }();
    const grpc::Status status = done ? grpc::Status::OK : to_status(done.error_value());
    response->mutable_status()->set_error_code(static_cast<tensorflow::error::Code>(status.error_code()));
    response->mutable_status()->set_error_message(status.error_message());
    reactor->Finish(status);
    return reactor;
  }

 private:
  grpc::Status status(const tfs::GetModelStatusRequest& request, tfs::GetModelStatusResponse& response) const {
    if (!request.has_model_spec() || request.model_spec().name().empty()) return invalid(missing_spec);
    auto spec = spec_of(request.model_spec());
    std::optional<int64_t> version = spec.version;
    if (!spec.version_label.empty()) {  // a label names the version it resolves to
      spec.signature_name.clear();
      auto found = models_.signatures(spec);
      if (!found) return to_status(found.error_value());
      version = found->first;
    }
    auto versions = models_.status(spec.name, version);
    if (!versions) return to_status(versions.error_value());
    for (const auto& v : *versions) {
      auto* entry = response.add_model_version_status();
      entry->set_version(v.version);
      entry->set_state(static_cast<tfs::ModelVersionStatus::State>(static_cast<int>(v.state)));
      auto* st = entry->mutable_status();
      st->set_error_code(static_cast<tensorflow::error::Code>(grpc_status_code(v.status.code)));
      st->set_error_message(v.status.message);
    }
    return grpc::Status::OK;
  }

  model_server& models_;
  const grpc_options& options_;
};

// Plain TCP, or TLS from the SSLConfig's PEM texts.
std::shared_ptr<grpc::ServerCredentials> credentials_of(const std::optional<tls_config>& tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl{tls->client_verify ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                           : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE};
  ssl.pem_root_certs = tls->custom_ca;
  ssl.pem_key_cert_pairs.push_back({tls->server_key, tls->server_cert});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

struct grpc_server::impl {
  grpc_options options;  // before the services, which keep a reference to it
  prediction_service predictions;
  model_service management;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  impl(model_server& models, grpc_options opts) : options(std::move(opts)), predictions(models, options), management(models, options) {}
  ~impl() {
    if (server) {
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds{5});
      server->Wait();
    }
  }
};

expected<std::unique_ptr<grpc_server>> grpc_server::start(model_server& models, const std::string& address, grpc_options options) {
  if (options.max_message_bytes == 0 || options.max_message_bytes > static_cast<std::size_t>(INT_MAX))
    return make_error(errc::invalid_argument, "grpc: max_message_bytes must be 1 to " + std::to_string(INT_MAX));
  if (options.threads > static_cast<std::size_t>(INT_MAX)) return make_error(errc::invalid_argument, "grpc: too many threads");
  // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock detection on: a
  // lock-order graph updated on every lock and on every mutex's destruction, and gRPC makes and
  // locks several per call. Release builds of Abseil have it off; this process does the same.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto state = std::make_unique<impl>(models, options);
  grpc::ServerBuilder builder;
  auto given = [&](std::string_view key) {
    return std::any_of(options.channel_arguments.begin(), options.channel_arguments.end(), [&](const auto& a) { return a.first == key; });
  };
  // Without this, gRPC binds with SO_REUSEPORT and a second server on a busy port "succeeds",
  // sharing its calls with the first.
  if (!given(GRPC_ARG_ALLOW_REUSEPORT)) builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, credentials_of(options.tls), &state->port);
  builder.RegisterService(&state->predictions);
  builder.RegisterService(&state->management);
  if (!given(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH)) builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  if (!given(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH)) builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  for (const auto& [key, value] : options.channel_arguments) {
    int number = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (ec == std::errc{} && end == value.data() + value.size()) builder.AddChannelArgument(key, number);
    else builder.AddChannelArgument(key, value);
  }
  if (options.threads > 0) {
    grpc::ResourceQuota quota{"actorflow_grpc"};
    quota.SetMaxThreads(static_cast<int>(options.threads));
    builder.SetResourceQuota(quota);
  }
  state->server = builder.BuildAndStart();
  if (!state->server || state->port == 0)
    return make_error(errc::io_error, "grpc: cannot listen on '" + address + "' (address in use, or not host:port" +
                                          (options.tls ? "; or the TLS key and certificate do not load)" : ")"));
  return std::unique_ptr<grpc_server>{new grpc_server{std::move(state)}};
}

expected<std::vector<std::pair<std::string, std::string>>> parse_channel_arguments(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return make_error(errc::invalid_argument, "grpc channel argument '" + std::string{item} + "' is not key=value");
    out.emplace_back(std::string{item.substr(0, eq)}, std::string{item.substr(eq + 1)});
  }
  return out;
}

grpc_server::grpc_server(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
grpc_server::~grpc_server() = default;

int grpc_server::port() const noexcept { return impl_->port; }

}  // namespace af::serving
