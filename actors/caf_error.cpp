#include "actors/caf_error.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace af {

caf::error make_caf_error(errc code, std::string context) {
  if (code == errc::none) return caf::error{};
  return caf::error{static_cast<uint8_t>(code), errc_category, caf::make_message(std::move(context))};
}

caf::error to_caf_error(const error& err) { return make_caf_error(err.code, err.message); }

error from_caf_error(const caf::error& err) {
  if (!err) return {};
  if (err.category() == errc_category) {
    std::string context;
    if (err.context().match_elements<std::string>()) context = err.context().get_as<std::string>(0);
    return make_error(static_cast<errc>(err.code()), std::move(context));
  }
  std::string text = caf::to_string(err);
  if (err.category() == caf::atom("system")) {
    switch (static_cast<caf::sec>(err.code())) {
      case caf::sec::request_timeout: return make_error(errc::timeout, std::move(text));
      case caf::sec::request_receiver_down:
      case caf::sec::remote_linking_failed:
      case caf::sec::cannot_connect_to_node:
      case caf::sec::no_route_to_receiving_node: return make_error(errc::peer_down, std::move(text));
      default: break;
    }
  }
  return make_error(errc::io_error, std::move(text));
}

void register_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(errc_category, [](uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string out = to_string(static_cast<errc>(code));
    if (ctx.match_elements<std::string>()) out += ": " + ctx.get_as<std::string>(0);
    return out;
  });
}

}  // namespace af
