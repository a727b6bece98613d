#pragma once

// TLS for the REST and gRPC front ends, as TF Serving's --ssl_config_file gives it (an SSLConfig
// text; serving_config.hpp reads it). The texts are PEM, not paths.

#include <string>

namespace af::serving {

struct tls_config {
  std::string server_key;   ///< the server's private key
  std::string server_cert;  ///< its certificate (chain)
  std::string custom_ca;    ///< the authority client certificates must be signed by
  bool client_verify = false;  ///< a client must present a certificate custom_ca signed
};

}  // namespace af::serving
