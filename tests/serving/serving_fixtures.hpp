#pragma once

// What the serving tests share: small SavedModels written as numbered versions, and a blocking
// HTTP/1.1 client for the REST front end.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "ops/train/layers.hpp"
#include "serialization/saved_model.hpp"

namespace af::testing {

/// A dense model x: f32[-1,4] -> y: f32[-1,3] with weights from `seed` (versions differ by seed).
inline nn::model small_dense(uint64_t seed) {
  auto x = nn::input({4}, dtype::f32, "x");
  auto y = nn::dense(3, {.name = "y"})(x);
  auto m = nn::model::functional({x}, {y}, {.seed = seed});
  if (!m) throw std::runtime_error(m.error_value().message);
  return std::move(*m);
}

/// Saves small_dense(seed) as `base/version`.
inline void save_version(const std::filesystem::path& base, int64_t version, uint64_t seed) {
  auto saved = saved_model::save(small_dense(seed), (base / std::to_string(version)).string());
  if (!saved) throw std::runtime_error(saved.error_value().message);
}

/// A model saved with TF Serving's classify and regress signatures over one input x: f32[-1,4]:
/// "serving_default" and "classify" (method classify: "scores" = softmax over 3 classes),
/// "regress" (method regress: "outputs" f32[-1,1]) and "predict" (the classifier, as predict).
inline void save_inference_model(const std::filesystem::path& dir, uint64_t seed = 7) {
  auto build = [&](const char* output, int64_t units, const char* activation, uint64_t model_seed) {
    auto x = nn::input({4}, dtype::f32, "x");
    auto y = nn::dense(units, {.activation = activation, .name = output})(x);
    auto m = nn::model::functional({x}, {y}, {.seed = model_seed});
    if (!m) throw std::runtime_error(m.error_value().message);
    return std::move(*m);
  };
  const nn::model classifier = build("scores", 3, "softmax", seed);
  const nn::model regressor = build("outputs", 1, "", seed + 1);
  graph::module functions;
  std::vector<named_tensor> variables;
  for (const auto* m : {&classifier, &regressor}) {
    auto body = m->inference_graph();
    if (!body) throw std::runtime_error(body.error_value().message);
    const std::string function = m == &classifier ? "classifier" : "regressor";
    auto sign = [&](const char* name, std::string_view method) {
      auto sig = graph::signature_of(name, function, *body, 1);
      sig.method_name = std::string{method};
      functions.signatures.push_back(std::move(sig));
    };
    if (m == &classifier) {
      sign("serving_default", graph::classify_method);
      sign("classify", graph::classify_method);
      sign("predict", graph::predict_method);
    } else {
      sign("regress", graph::regress_method);
    }
    functions.functions.push_back({function, std::move(*body)});
    for (std::size_t i = 0; i < m->weights().size(); ++i) variables.push_back({m->weights()[i].name, m->weight_values()[i]});
  }
  auto saved = saved_model::save(functions, variables, dir.string());
  if (!saved) throw std::runtime_error(saved.error_value().message);
}

/// A model with a DT_STRING input passed through, as batch-prediction keys are: x: f32[-1,2] and
/// key: string[-1] in; "squares" (x * x), "key" and "key_bytes" (the key again, under a name that
/// TF Serving's REST API writes as {"b64": ...}) out, as "serving_default".
inline void save_keyed_model(const std::filesystem::path& dir) {
  graph::graph_builder b;
  const auto x = b.parameter({dtype::f32, {-1, 2}}, "x");
  const auto key = b.parameter({dtype::string, {-1}}, "key");
  const auto squares = b.add("mul", {x, x});
  if (!squares) throw std::runtime_error(squares.error_value().message);
  auto g = std::move(b).finish({*squares, key, key}, {"squares", "key", "key_bytes"});
  graph::module functions;
  functions.signatures.push_back(graph::signature_of("serving_default", "keyed", g));
  functions.functions.push_back({"keyed", std::move(g)});
  auto saved = saved_model::save(functions, {}, dir.string());
  if (!saved) throw std::runtime_error(saved.error_value().message);
}

struct http_answer {
  int status = 0;
  std::string headers;
  std::string body;
};

/// One keep-alive connection to 127.0.0.1:port; requests are sent one at a time.
class http_client {
 public:
  explicit http_client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("connect failed");
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~http_client() { ::close(fd_); }
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  /// Sends a request and reads its answer (Content-Length bodies); status 0 when the server
  /// closed the connection without answering.
  http_answer request(const std::string& method, const std::string& path, const std::string& body = "",
                      const std::string& extra_headers = "") {
    std::string raw = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" + extra_headers +
                      "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    for (std::size_t sent = 0; sent < raw.size();) {
      const ssize_t n = ::send(fd_, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return {};
      sent += static_cast<std::size_t>(n);
    }
    std::size_t header_end;
    while ((header_end = pending_.find("\r\n\r\n")) == std::string::npos)
      if (!read_more()) return {};
    http_answer out;
    out.headers = pending_.substr(0, header_end);
    out.status = std::stoi(out.headers.substr(9, 3));
    std::size_t length = 0;
    for (const char* key : {"Content-Length: ", "content-length: "})
      if (auto at = out.headers.find(key); at != std::string::npos) length = std::stoul(out.headers.substr(at + 16));
    while (pending_.size() < header_end + 4 + length)
      if (!read_more()) return {};
    out.body = pending_.substr(header_end + 4, length);
    pending_.erase(0, header_end + 4 + length);
    return out;
  }

  /// Whether the server has closed this connection (reads EOF).
  bool closed_by_server() {
    char c;
    return ::recv(fd_, &c, 1, 0) == 0;
  }

 private:
  bool read_more() {
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    pending_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string pending_;
};

}  // namespace af::testing
