#include "apps/serving/actor_endpoint.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <map>
#include <optional>

#include <atomic>
#include <thread>

#include "actors/caf_error.hpp"
#include "actors/message_types.hpp"
#include "actors/runtime.hpp"
#include "actors/serving_protocol.hpp"
#include "apps/serving/bearer_token.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/request_deadline.hpp"

namespace af::serving {

namespace {

model_spec spec_of(std::string name, int64_t version, std::string label, std::string signature = {}) {
  model_spec spec{std::move(name), std::nullopt, std::move(label), std::move(signature)};
  if (version != any_version) spec.version = version;
  return spec;
}

// The name of the first output holding strings, which no CAF message carries (tensor_inspect.hpp).
std::optional<std::string> string_output(const prediction& answer) {
  for (std::size_t i = 0; i < answer.outputs.size(); ++i)
    if (is_string(answer.outputs[i].type())) return answer.signature->outputs[i].name;
  return std::nullopt;
}

using answered_atom = caf::atom_constant<caf::atom("af_sansw")>;
using refused_atom = caf::atom_constant<caf::atom("af_srefu")>;
using close_atom = caf::atom_constant<caf::atom("af_sclose")>;

struct endpoint_state {
  std::map<uint64_t, caf::response_promise> waiting;  // by request number
  uint64_t next = 0;
};

// The endpoint actor: each request handed to the model server; its answer (from a batcher thread)
// comes back to this actor as a message, which delivers it to the requester (promises are
// delivered from their actor's own thread). `in_flight` lets the owner wait for those answers.
caf::behavior endpoint(caf::stateful_actor<endpoint_state>* self, model_server* models,
                       std::shared_ptr<std::atomic<int64_t>> in_flight, std::string token) {
  // Every request is checked, not only the hello (serving_protocol.hpp says why).
  auto refused = [token](const std::string& credential) -> std::optional<caf::error> {
    if (token.empty() || bearer_matches(credential, token)) return std::nullopt;
    return to_caf_error(make_error(errc::protocol_violation, "the serving endpoint wants a bearer token: missing or wrong"));
  };
  return {
      [refused](serve_hello_atom, const std::string& credential) -> caf::result<bool> {
        if (auto no = refused(credential)) return std::move(*no);
        return true;
      },
      [self, models, in_flight, refused](serve_predict_atom, const std::string& credential, std::string& name, int64_t version,
                                         std::string& label, std::string& signature, std::vector<named_tensor>& inputs,
                                         int64_t timeout_ms) {
        if (auto no = refused(credential)) {
          self->make_response_promise().deliver(std::move(*no));
          return;
        }
        const uint64_t id = self->state.next++;
        self->state.waiting.emplace(id, self->make_response_promise());
        std::optional<clock_type::time_point> deadline;
        if (timeout_ms > 0) deadline = deadline_after(timeout_ms);
        in_flight->fetch_add(1);
        models->predict_async(spec_of(std::move(name), version, std::move(label), std::move(signature)), std::move(inputs), deadline,
                              [me = caf::actor{self}, id, in_flight](expected<prediction> answer) {
                                if (!answer) {
                                  caf::anon_send(me, refused_atom::value, id, to_caf_error(answer.error_value()));
                                } else if (auto strings = string_output(*answer)) {
                                  // CAF would fail to serialise the reply and the caller would wait out its
                                  // deadline: refuse it now, by name.
                                  caf::anon_send(me, refused_atom::value, id,
                                                 to_caf_error(error{errc::unsupported, "output '" + *strings +
                                                                                           "' is DT_STRING, which the actor endpoint "
                                                                                           "does not carry yet (use REST or gRPC)"}));
                                } else {
                                  std::vector<named_tensor> outputs;
                                  for (std::size_t i = 0; i < answer->outputs.size(); ++i)
                                    outputs.push_back({answer->signature->outputs[i].name, std::move(answer->outputs[i])});
                                  caf::anon_send(me, answered_atom::value, id, answer->version, std::move(outputs));
                                }
                                in_flight->fetch_sub(1);
                              });
      },
      [self](answered_atom, uint64_t id, int64_t version, std::vector<named_tensor>& outputs) {
        auto it = self->state.waiting.find(id);
        if (it == self->state.waiting.end()) return;
        it->second.deliver(version, std::move(outputs));
        self->state.waiting.erase(it);
      },
      [self](refused_atom, uint64_t id, caf::error& err) {
        auto it = self->state.waiting.find(id);
        if (it == self->state.waiting.end()) return;
        it->second.deliver(std::move(err));
        self->state.waiting.erase(it);
      },
      [models, refused](serve_metadata_atom, const std::string& credential, std::string& name, int64_t version, std::string& label)
          -> caf::result<int64_t, std::string> {
        if (auto no = refused(credential)) return std::move(*no);
        auto sigs = models->signatures(spec_of(std::move(name), version, std::move(label)));
        if (!sigs) return to_caf_error(sigs.error_value());
        return {sigs->first, encode_signatures(sigs->second)};
      },
      // After the answers ahead of it in the mailbox (an exit message would overtake them).
      [self](close_atom) { self->quit(); },
      [models, refused](serve_status_atom, const std::string& credential, std::string& name, int64_t version) -> caf::result<std::string> {
        if (auto no = refused(credential)) return std::move(*no);
        auto status = models->status(name, version == any_version ? std::nullopt : std::optional<int64_t>{version});
        if (!status) return to_caf_error(status.error_value());
        return encode_statuses(*status);
      },
  };
}

}  // namespace

struct actor_endpoint::impl {
  caf::actor_system* sys = nullptr;
  caf::actor actor;
  uint16_t port = 0;
  std::shared_ptr<std::atomic<int64_t>> in_flight = std::make_shared<std::atomic<int64_t>>(0);
};

expected<std::unique_ptr<actor_endpoint>> actor_endpoint::start(runtime& rt, model_server& models, const std::string& address,
                                                                uint16_t port, std::string bearer_token) {
  auto& sys = rt.system();
  if (!sys.has_middleman()) return make_error(errc::invalid_argument, "actor endpoint: the runtime has no network");
  auto state = std::make_unique<impl>();
  state->sys = &sys;
  state->actor = sys.spawn(endpoint, &models, state->in_flight, std::move(bearer_token));
  auto published = sys.middleman().publish(state->actor, port, address.c_str(), true);
  if (!published) {
    caf::anon_send_exit(state->actor, caf::exit_reason::user_shutdown);
    return make_error(errc::io_error, "actor endpoint: cannot listen on " + address + ":" + std::to_string(port) + ": " +
                                          sys.render(published.error()));
  }
  state->port = *published;
  return std::unique_ptr<actor_endpoint>(new actor_endpoint(std::move(state)));
}

actor_endpoint::actor_endpoint(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

actor_endpoint::~actor_endpoint() {
  impl_->sys->middleman().unpublish(impl_->actor, impl_->port);
  // Answers on their way hold promises to this actor's requests: let them arrive before it stops.
  while (impl_->in_flight->load() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  caf::anon_send(impl_->actor, close_atom::value);
}

uint16_t actor_endpoint::port() const { return impl_->port; }

}  // namespace af::serving
