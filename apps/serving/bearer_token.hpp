#pragma once

// The one check every front end makes when a token is configured: REST's `Authorization` header,
// gRPC's `authorization` metadata and the actor endpoint's requests all carry "Bearer <token>".

#include <string_view>

namespace af::serving {

/// Whether `credential` is "Bearer <token>". Compares in time that does not depend on where the
/// first difference is, so the token cannot be guessed a character at a time.
inline bool bearer_matches(std::string_view credential, std::string_view token) noexcept {
  constexpr std::string_view scheme = "Bearer ";
  if (token.empty() || credential.size() <= scheme.size() || credential.substr(0, scheme.size()) != scheme) return false;
  const std::string_view given = credential.substr(scheme.size());
  unsigned diff = given.size() == token.size() ? 0u : 1u;
  for (std::size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned>(token[i] ^ (i < given.size() ? given[i] : 0));
  return diff == 0;
}

}  // namespace af::serving
