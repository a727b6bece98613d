#include "actors/serving_client.hpp"

#include <caf/scoped_actor.hpp>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"
#include "actors/middleman_connect.hpp"
#include "actors/runtime.hpp"
#include "actors/serving_protocol.hpp"

namespace af::serving {

namespace {

// Time for the answer to travel back after the server's deadline passed.
constexpr std::chrono::seconds reply_margin{5};
constexpr std::chrono::seconds metadata_timeout{30};

}  // namespace

struct client::impl {
  caf::actor_system* sys = nullptr;
  caf::actor endpoint;
  std::string where;
  std::string credential;  // "Bearer <token>", or empty

  error name_peer(error e) const {
    if (e.code == errc::peer_down || e.code == errc::io_error) e.message = "serving endpoint " + where + ": " + e.message;
    return e;
  }
};

expected<client> client::connect(runtime& rt, const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                                 const std::string& bearer_token) {
  auto& sys = rt.system();
  const std::string where = host + ":" + std::to_string(port);
  if (!sys.has_middleman())
    return make_error(errc::invalid_argument, "serving client: the runtime has no network (runtime_options::network)");
  auto remote = connect_middleman(sys, host, port, timeout);
  if (!remote) return make_error(errc::peer_down, "cannot reach a serving endpoint at " + where + ": " + sys.render(remote.error()));
  auto state = std::make_unique<impl>();
  state->sys = &sys;
  state->endpoint = std::move(*remote);
  state->where = where;
  if (!bearer_token.empty()) state->credential = "Bearer " + bearer_token;
  // The token is checked once here, so that a wrong one fails at connect time and not at the
  // first request.
  caf::scoped_actor self{sys};
  error refused;
  self->request(state->endpoint, timeout, serve_hello_atom::value, state->credential)
      .receive([](bool) {}, [&](caf::error& err) { refused = state->name_peer(from_caf_error(err)); });
  if (refused) return refused;
  return client{std::move(state)};
}

client::client(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
client::client(client&&) noexcept = default;
client& client::operator=(client&&) noexcept = default;
client::~client() = default;

expected<client::answer> client::predict(const model_spec& spec, std::vector<named_tensor> inputs,
                                         std::chrono::milliseconds timeout) const {
  // A string tensor cannot be serialised (tensor_inspect.hpp): refused here, not lost on the way.
  for (const auto& in : inputs)
    if (is_string(in.value.type()))
      return make_error(errc::unsupported, "input '" + in.name + "' is DT_STRING, which the actor endpoint does not carry yet (use REST or gRPC)");
  caf::scoped_actor self{*impl_->sys};
  expected<answer> out = make_error(errc::timeout, "no answer");
  self->request(impl_->endpoint, timeout + reply_margin, serve_predict_atom::value, impl_->credential, spec.name, spec.version.value_or(any_version),
                spec.version_label, spec.signature_name, std::move(inputs), static_cast<int64_t>(timeout.count()))
      .receive([&](int64_t version, std::vector<named_tensor>& outputs) { out = answer{version, std::move(outputs)}; },
               [&](caf::error& err) { out = impl_->name_peer(from_caf_error(err)); });
  return out;
}

expected<std::pair<int64_t, std::vector<graph::signature>>> client::metadata(const model_spec& spec) const {
  caf::scoped_actor self{*impl_->sys};
  expected<std::pair<int64_t, std::vector<graph::signature>>> out = make_error(errc::timeout, "no answer");
  self->request(impl_->endpoint, metadata_timeout, serve_metadata_atom::value, impl_->credential, spec.name, spec.version.value_or(any_version),
                spec.version_label)
      .receive(
          [&](int64_t version, std::string& text) {
            auto sigs = decode_signatures(text);
            if (!sigs) out = sigs.error_value();
            else out = std::pair<int64_t, std::vector<graph::signature>>{version, std::move(*sigs)};
          },
          [&](caf::error& err) { out = impl_->name_peer(from_caf_error(err)); });
  return out;
}

expected<std::vector<version_status>> client::status(const std::string& model, std::optional<int64_t> version) const {
  caf::scoped_actor self{*impl_->sys};
  expected<std::vector<version_status>> out = make_error(errc::timeout, "no answer");
  self->request(impl_->endpoint, metadata_timeout, serve_status_atom::value, impl_->credential, model, version.value_or(any_version))
      .receive([&](std::string& text) { out = decode_statuses(text); },
               [&](caf::error& err) { out = impl_->name_peer(from_caf_error(err)); });
  return out;
}

}  // namespace af::serving
