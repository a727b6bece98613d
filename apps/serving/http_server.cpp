// The REST front end on Boost.Beast: one io_context per I/O thread, each connection on one of
// them (so its handlers never run concurrently, without a strand), requests handed to the model
// server without blocking an I/O thread, answers posted back to the connection's context.

#include "apps/serving/http_server.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "apps/serving/bearer_token.hpp"
#include "apps/serving/metrics.hpp"
#include "apps/serving/model_server.hpp"
#include "apps/serving/request_deadline.hpp"
#include "apps/serving/rest_codec.hpp"
#include "apps/serving/rest_fast_decode.hpp"
#include "apps/serving/rest_inference.hpp"

namespace af::serving {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
// A concrete executor: the type-erased default costs an allocation and several indirect calls
// per operation, a measurable share of a small request.
using io_executor = asio::io_context::executor_type;
using stream_type = beast::basic_stream<tcp, io_executor>;
using socket_type = stream_type::socket_type;
using tls_stream_type = beast::ssl_stream<stream_type>;

int http_status_for(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument: case errc::shape_mismatch: case errc::dtype_mismatch: case errc::unknown_dtype:
    case errc::out_of_range: case errc::malformed_input: case errc::failed_precondition: return 400;
    case errc::not_found: return 404;
    case errc::resource_exhausted: case errc::out_of_memory: return 429;
    case errc::timeout: return 504;
    case errc::unsupported: return 501;
    case errc::cancelled: case errc::peer_down: return 503;
    case errc::internal: return 500;
    default: return 500;
  }
}

namespace {

// What a URL under /v1/models/ asks for.
struct model_route {
  model_spec spec;
  enum class kind { status, metadata, predict, classify, regress } what = kind::status;
};

// "/v1/models/NAME[/versions/V | /labels/L][/metadata | :METHOD]"; nullopt when it is not that.
std::optional<model_route> parse_model_path(std::string_view path) {
  constexpr std::string_view prefix = "/v1/models/";
  if (path.substr(0, prefix.size()) != prefix) return std::nullopt;
  path.remove_prefix(prefix.size());
  model_route route;
  bool has_method = false;
  if (auto colon = path.rfind(':'); colon != std::string_view::npos) {
    const auto method = path.substr(colon + 1);
    path = path.substr(0, colon);
    has_method = true;
    if (method == "predict") route.what = model_route::kind::predict;
    else if (method == "classify") route.what = model_route::kind::classify;
    else if (method == "regress") route.what = model_route::kind::regress;
    else return std::nullopt;
  }
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    const auto slash = path.find('/');
    parts.push_back(path.substr(0, slash));
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
  }
  if (!parts.empty() && parts.back() == "metadata" && !has_method) {
    route.what = model_route::kind::metadata;
    parts.pop_back();
  }
  if (parts.empty() || parts[0].empty()) return std::nullopt;
  route.spec.name = std::string{parts[0]};
  if (parts.size() == 3 && parts[1] == "versions") {
    int64_t v = 0;
    auto r = std::from_chars(parts[2].data(), parts[2].data() + parts[2].size(), v);
    if (r.ec != std::errc{} || r.ptr != parts[2].data() + parts[2].size()) return std::nullopt;
    route.spec.version = v;
  } else if (parts.size() == 3 && parts[1] == "labels") {
    route.spec.version_label = std::string{parts[2]};
  } else if (parts.size() != 1) {
    return std::nullopt;
  }
  return route;
}

struct server_context {
  model_server* models = nullptr;
  std::shared_ptr<serving_metrics> metrics;
  http_options options;
  std::atomic<std::size_t> connections{0};
  // Predictions handed to the model server and not yet posted back: the I/O context must outlive
  // them, since their answers are posted to it.
  std::atomic<std::size_t> outstanding{0};
  // Set when the server speaks TLS; shared, so that it outlives every session using it.
  std::shared_ptr<asio::ssl::context> tls;
};

// The server's TLS context from the SSLConfig's PEM texts: TLS 1.2 and later, and with
// client_verify a certificate signed by custom_ca required of every client.
expected<std::shared_ptr<asio::ssl::context>> make_tls_context(const tls_config& config) {
  auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  beast::error_code ec;
  tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                       asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                   ec);
  auto failed = [&](const char* what) { return make_error(errc::invalid_argument, std::string{"REST TLS: "} + what + ": " + ec.message()); };
  if (ec) return failed("cannot set the protocol options");
  tls->use_certificate_chain(asio::buffer(config.server_cert), ec);
  if (ec) return failed("server_cert does not load");
  tls->use_private_key(asio::buffer(config.server_key), asio::ssl::context::pem, ec);
  if (ec) return failed("server_key does not load");
  if (!config.custom_ca.empty()) {
    tls->add_certificate_authority(asio::buffer(config.custom_ca), ec);
    if (ec) return failed("custom_ca does not load");
  }
  if (config.client_verify) {
    tls->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
    if (ec) return failed("cannot ask for client certificates");
  }
  return tls;
}

// What the idle sweep needs of a connection, plain or TLS.
class connection {
 public:
  virtual ~connection() = default;
  // Called by the sweep (the connection's thread): closes a connection whose read or write has
  // been waiting longer than `timeout`. One waiting for the model is left alone.
  virtual void close_if_idle(clock_type::time_point now, std::chrono::seconds timeout) = 0;
};

// The connections of one I/O context, swept once a second for those idle (or stuck writing)
// longer than the timeout. Per-operation timers cost a timer-queue insertion and removal, and
// often a timerfd update, on every read and write of every request.
class idle_sweeper {
 public:
  idle_sweeper(asio::io_context& context, std::chrono::seconds timeout) : timer_(context), timeout_(timeout) {}
  // On the context's thread only (sessions register in start(), the sweep runs there too).
  void add(std::weak_ptr<connection> s) { sessions_.push_back(std::move(s)); }
  void start() { arm(); }

 private:
  void arm();
  void sweep();

  asio::steady_timer timer_;
  std::chrono::seconds timeout_;
  std::vector<std::weak_ptr<connection>> sessions_;
};

// One connection; Stream is the plain TCP stream or a TLS stream over it (`tls...` its context).
template <class Stream>
class session : public connection, public std::enable_shared_from_this<session<Stream>> {
  static constexpr bool is_tls = !std::is_same_v<Stream, stream_type>;

 public:
  template <class... Tls>
  session(socket_type socket, std::shared_ptr<server_context> ctx, idle_sweeper& sweeper, Tls&... tls)
      : stream_(std::move(socket), tls...), ctx_(std::move(ctx)), sweeper_(&sweeper) {
    ctx_->connections.fetch_add(1);
    // Beast reads as much as the buffer's spare capacity, and a flat buffer grows only as far as
    // one read asks: left alone it stays at 512 bytes, and a 5 KB request costs ten receive calls.
    buffer_.reserve(read_buffer_bytes);
  }
  ~session() { ctx_->connections.fetch_sub(1); }

  void start() {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      self->sweeper_->add(self);
      if constexpr (is_tls) {
        // A handshake that stalls is closed by the idle sweep like a stalled read.
        self->io_started_ = clock_type::now();
        self->stream_.async_handshake(asio::ssl::stream_base::server, [self](beast::error_code ec) {
          self->io_started_ = {};
          if (ec || self->timed_out_) return self->close();
          self->read();
        });
      } else {
        self->read();
      }
    });
  }

  void close_if_idle(clock_type::time_point now, std::chrono::seconds timeout) override {
    if (io_started_ == clock_type::time_point{} || now - io_started_ < timeout) return;
    timed_out_ = true;
    beast::error_code ignored;
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
  }

 private:
  static constexpr std::size_t read_buffer_bytes = 16 * 1024;
  // The largest body of a refused request read to keep its connection open.
  static constexpr std::size_t drain_limit_bytes = 64 * 1024;

  // A request is read in two steps: its head, which is screened (token, size, route, admission)
  // before any of its body is read, then its body.
  void read() {
    parser_.emplace();
    parser_->body_limit(ctx_->options.max_body_bytes);
    pending_.reset();
    io_started_ = clock_type::now();
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    io_started_ = {};
    if (timed_out_) return;
    if (ec == http::error::end_of_stream || ec == asio::error::connection_reset) return close();
    version_ = 11;
    // Beast checks a declared Content-Length against the body limit as it parses the head.
    if (ec == http::error::body_limit)
      return reply(413, encode_error("the request body exceeds " + std::to_string(ctx_->options.max_body_bytes) + " bytes"), false);
    if (ec) return reply(400, encode_error("malformed HTTP request: " + ec.message()), false);
    const auto& head = parser_->get();
    version_ = head.version() == 10 ? 10 : 11;
    keep_ = head.keep_alive();
    const auto length = parser_->content_length();
    if (length && *length > ctx_->options.max_body_bytes)
      return reply(413, encode_error("the request body of " + std::to_string(*length) + " bytes exceeds " +
                                     std::to_string(ctx_->options.max_body_bytes)), false);
    screen(head);
    if (parser_->is_done()) return on_body({});  // no body
    if (pending_) {
      // A refused request's body is read (and dropped) only when it is small, so that the
      // connection stays usable; a large one is not worth receiving: the connection closes.
      if (!length || *length > drain_limit_bytes) return reply_pending(false);
    }
    io_started_ = clock_type::now();
    http::async_read(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code body_ec, std::size_t) { self->on_body(body_ec); });
  }

  void on_body(beast::error_code ec) {
    io_started_ = {};
    if (timed_out_) return;
    if (ec == http::error::end_of_stream || ec == asio::error::connection_reset) return close();
    if (ec == http::error::body_limit)
      return reply(413, encode_error("the request body exceeds " + std::to_string(ctx_->options.max_body_bytes) + " bytes"), false);
    if (ec) return reply(400, encode_error("malformed HTTP request: " + ec.message()), false);
    if (pending_) return reply_pending(keep_);
    request_ = parser_->release();
    if (predict_kind_ == model_route::kind::predict) return predict(std::move(predict_spec_), keep_);
    infer(std::move(predict_spec_), predict_kind_ == model_route::kind::classify ? inference_method::classify : inference_method::regress,
          keep_);
  }

  // Decides what the head alone decides: sets pending_ to the answer, or predict_spec_ to the
  // model a predict goes to (admitted, its body still to be read).
  void screen(const http::request<http::string_body>& head) {
    auto refuse = [&](int status, std::string message, bool ask_token = false) {
      pending_ = pending_reply{status, encode_error(message), ask_token};
    };
    if (!ctx_->options.bearer_token.empty()) {
      const auto field = head[http::field::authorization];
      if (!bearer_matches({field.data(), field.size()}, ctx_->options.bearer_token))
        return refuse(401, "missing or wrong bearer token", true);
    }
    const std::string_view target{head.target().data(), head.target().size()};
    const std::string_view path = target.substr(0, target.find('?'));
    if (!ctx_->options.metrics_path.empty() && path == ctx_->options.metrics_path) {
      if (head.method() != http::verb::get) return refuse(405, "use GET for metrics");
      if (!ctx_->metrics) return refuse(404, "metrics are off");
      pending_ = pending_reply{200, ctx_->metrics->prometheus_text(), false, "text/plain; version=0.0.4"};
      return;
    }
    // TF Serving's rules: a path outside /v1/ is not found; one under it that names nothing it
    // serves, or with the wrong method, is a malformed request (400).
    const auto malformed = [&] { refuse(400, "Malformed request: " + std::string{head.method_string()} + " " + std::string{path}); };
    auto route = parse_model_path(path);
    if (!route) return path.starts_with("/v1/") ? malformed() : refuse(404, "Not found: " + std::string{path});
    auto answer = [&](auto found, auto encode) {
      if (!found) return refuse(http_status_for(found.error_value().code), found.error_value().message);
      pending_ = pending_reply{200, encode(*found)};
    };
    switch (route->what) {
      case model_route::kind::status:
        if (head.method() != http::verb::get) return malformed();
        return answer(ctx_->models->status(route->spec.name, route->spec.version), [](const auto& s) { return encode_status(s); });
      case model_route::kind::metadata:
        if (head.method() != http::verb::get) return malformed();
        return answer(ctx_->models->signatures(route->spec),
                      [&](const auto& sigs) { return encode_metadata(route->spec.name, sigs.first, sigs.second); });
      case model_route::kind::predict: case model_route::kind::classify: case model_route::kind::regress:
        break;
    }
    if (head.method() != http::verb::post) return malformed();
    // A full queue or an unknown model is answered before the body is read or parsed: refusing
    // must cost far less than serving, or an overloaded server would spend its time parsing
    // requests it then refuses.
    if (auto admitted = ctx_->models->admit(route->spec); !admitted)
      return refuse(http_status_for(admitted.error_value().code), admitted.error_value().message);
    deadline_.reset();
    if (ctx_->options.request_timeout.count() > 0) deadline_ = deadline_after(ctx_->options.request_timeout.count());
    if (auto timeout = head["X-Request-Timeout-Ms"]; !timeout.empty()) {
      int64_t ms = 0;
      auto r = std::from_chars(timeout.data(), timeout.data() + timeout.size(), ms);
      if (r.ec != std::errc{} || r.ptr != timeout.data() + timeout.size() || ms < 0)
        return refuse(400, "X-Request-Timeout-Ms must be a number of milliseconds, not '" + std::string{timeout} + "'");
      deadline_ = deadline_after(ms);
    }
    predict_spec_ = std::move(route->spec);
    predict_kind_ = route->what;
  }

  void reply_pending(bool keep) {
    auto p = std::move(*pending_);
    pending_.reset();
    reply(p.status, std::move(p.body), keep, p.ask_token, p.type);
  }

  void predict(model_spec spec, bool keep) {
    auto& models = *ctx_->models;
    const signature_lookup lookup = [&](const std::string& signature_name) {
      model_spec with = spec;
      with.signature_name = signature_name;
      return models.find_signature(with);
    };
    auto simple = decode_simple_predict(request_.body(), lookup);
    auto decoded = simple ? expected<rest_predict_request>{std::move(*simple)} : decode_predict(request_.body(), lookup);
    if (!decoded) return reply(http_status_for(decoded.error_value().code), encode_error(decoded.error_value().message), keep);
    spec.signature_name = decoded->signature_name;
    const bool row_format = decoded->row_format;
    ctx_->outstanding.fetch_add(1);
    models.predict_async(spec, std::move(decoded->inputs), deadline_,
                         [self = this->shared_from_this(), keep, row_format](expected<prediction> answer) {
                           // The batcher's thread: encoding waits for the connection's own thread.
                           auto ctx = self->ctx_;
                           asio::post(self->stream_.get_executor(), [self, keep, row_format, answer = std::move(answer)]() mutable {
                             if (answer) return self->reply(200, encode_predict(*answer, row_format), keep);
                             self->reply(http_status_for(answer.error_value().code), encode_error(answer.error_value().message), keep);
                           });
                           ctx->outstanding.fetch_sub(1);
                         });
  }

  // :classify and :regress: the examples against the signature the body names.
  void infer(model_spec spec, inference_method method, bool keep) {
    auto decoded = decode_inference(request_.body());
    if (!decoded) return reply(http_status_for(decoded.error_value().code), encode_error(decoded.error_value().message), keep);
    spec.signature_name = std::move(decoded->signature_name);
    auto batch = std::make_shared<const example_batch>(std::move(decoded->batch));
    ctx_->outstanding.fetch_add(1);
    infer_async(*ctx_->models, spec, method, std::move(batch), deadline_,
                [self = this->shared_from_this(), keep](expected<inference_answer> answer) {
                  auto ctx = self->ctx_;
                  asio::post(self->stream_.get_executor(), [self, keep, answer = std::move(answer)]() mutable {
                    if (!answer) return self->reply(http_status_for(answer.error_value().code), encode_error(answer.error_value().message), keep);
                    self->reply(200, answer->method == inference_method::classify ? encode_classification(*answer) : encode_regression(*answer),
                                keep);
                  });
                  ctx->outstanding.fetch_sub(1);
                });
  }

  // The status line and headers are written by hand into one string, sent with the body in one
  // gathered write: Beast's serializer walks a buffer-sequence view and a field list it allocates
  // per header, a tenth of a refused request's CPU.
  void reply(int status, std::string body, bool keep, bool ask_token = false, const char* type = "application/json") {
    const unsigned version = version_;
    head_.clear();
    head_ += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
    head_ += std::to_string(status);
    head_ += ' ';
    const auto reason = http::obsolete_reason(static_cast<http::status>(status));
    head_.append(reason.data(), reason.size());
    head_ += "\r\nServer: actorflow\r\nContent-Type: ";
    head_ += type;
    if (ask_token) head_ += "\r\nWWW-Authenticate: Bearer";
    // HTTP/1.1 keeps a connection unless told to close; HTTP/1.0 closes unless told to keep it.
    if (version == 11 && !keep) head_ += "\r\nConnection: close";
    if (version == 10 && keep) head_ += "\r\nConnection: keep-alive";
    head_ += "\r\nContent-Length: ";
    head_ += std::to_string(body.size());
    head_ += "\r\n\r\n";
    body_ = std::move(body);
    io_started_ = clock_type::now();
    const std::array<asio::const_buffer, 2> parts{asio::buffer(head_), asio::buffer(body_)};
    asio::async_write(stream_, parts, [self = this->shared_from_this(), keep](beast::error_code ec, std::size_t) {
      self->io_started_ = {};
      if (ec || !keep || self->timed_out_) return self->close();
      self->read();
    });
  }

  // The TCP side is shut down without TLS's close_notify: every answer carries its length, so a
  // truncation cannot pass for a whole answer, and no close waits on a peer's close_notify.
  void close() {
    beast::error_code ignored;
    socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  socket_type& socket() { return beast::get_lowest_layer(stream_).socket(); }

  Stream stream_;
  std::shared_ptr<server_context> ctx_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  // What the head of the request being read decided: an answer (sent once its small body is
  // read), or the admitted model and deadline of a predict.
  struct pending_reply {
    int status;
    std::string body;
    bool ask_token = false;
    const char* type = "application/json";
  };
  std::optional<pending_reply> pending_;
  model_spec predict_spec_;
  model_route::kind predict_kind_ = model_route::kind::predict;
  std::optional<clock_type::time_point> deadline_;
  unsigned version_ = 11;
  bool keep_ = true;
  std::string head_, body_;  // the answer being written
  idle_sweeper* sweeper_;
  clock_type::time_point io_started_{};  // when the pending read or write began; zero: none pending
  bool timed_out_ = false;
};

void idle_sweeper::arm() {
  timer_.expires_after(std::chrono::seconds(1));
  timer_.async_wait([this](beast::error_code ec) {
    if (ec) return;
    sweep();
    arm();
  });
}

void idle_sweeper::sweep() {
  const auto now = clock_type::now();
  std::erase_if(sessions_, [&](const std::weak_ptr<connection>& weak) {
    auto s = weak.lock();
    if (!s) return true;
    s->close_if_idle(now, timeout_);
    return false;
  });
}

}  // namespace

struct http_server::impl {
  // Context i is run by thread i alone; connections are dealt to them in turn. One context per
  // thread keeps the threads off each other's locks (a shared context's scheduler and every
  // connection's strand were contended on each operation).
  std::vector<std::unique_ptr<asio::io_context>> contexts;
  std::vector<std::unique_ptr<idle_sweeper>> sweepers;  // one per context
  std::vector<asio::executor_work_guard<io_executor>> keep_running;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::shared_ptr<server_context> ctx = std::make_shared<server_context>();
  std::vector<std::thread> threads;
  std::size_t next_context = 0;

  // Paces accept() when the process is out of descriptors (or the kernel of memory): the pending
  // connection stays in the backlog, and accepting again at once would spin a core on EMFILE.
  std::unique_ptr<asio::steady_timer> accept_pause;

  void accept() {
    const std::size_t target = next_context++ % contexts.size();
    acceptor->async_accept(contexts[target]->get_executor(), [this, target](beast::error_code ec, socket_type socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
          ec.value() == ENFILE) {
        accept_pause->expires_after(std::chrono::milliseconds(50));
        accept_pause->async_wait([this](beast::error_code wait_ec) {
          if (!wait_ec) accept();
        });
        return;
      }
      if (!ec) {
        if (ctx->connections.load() >= ctx->options.max_connections) {
          beast::error_code ignored;
          socket.close(ignored);
        } else {
          socket.set_option(tcp::no_delay(true), ec);
          if (ctx->tls)
            std::make_shared<session<tls_stream_type>>(std::move(socket), ctx, *sweepers[target], *ctx->tls)->start();
          else
            std::make_shared<session<stream_type>>(std::move(socket), ctx, *sweepers[target])->start();
        }
      }
      accept();
    });
  }
};

expected<std::unique_ptr<http_server>> http_server::start(model_server& models, std::shared_ptr<serving_metrics> metrics,
                                                          http_options options) {
  auto state = std::make_unique<impl>();
  const std::size_t threads = std::max<std::size_t>(options.threads, 1);
  for (std::size_t i = 0; i < threads; ++i) {
    state->contexts.push_back(std::make_unique<asio::io_context>(1));
    state->sweepers.push_back(std::make_unique<idle_sweeper>(*state->contexts.back(), options.idle_timeout));
    state->keep_running.push_back(asio::make_work_guard(*state->contexts.back()));
  }
  state->acceptor = std::make_unique<tcp::acceptor>(*state->contexts.front());
  state->accept_pause = std::make_unique<asio::steady_timer>(*state->contexts.front());
  state->ctx->models = &models;
  state->ctx->metrics = std::move(metrics);
  state->ctx->options = options;
  if (options.tls) {
    AF_TRY_ASSIGN(state->ctx->tls, make_tls_context(*options.tls));
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(options.address, ec);
  if (ec) return make_error(errc::invalid_argument, "REST: '" + options.address + "' is not an IP address");
  const tcp::endpoint endpoint{address, options.port};
  const std::string where = options.address + ":" + std::to_string(options.port);
  state->acceptor->open(endpoint.protocol(), ec);
  if (!ec) state->acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) state->acceptor->bind(endpoint, ec);
  if (!ec) state->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(errc::io_error, "REST: cannot listen on " + where + ": " + ec.message());
  state->accept();
  for (std::size_t i = 0; i < threads; ++i) {
    asio::post(*state->contexts[i], [sweeper = state->sweepers[i].get()] { sweeper->start(); });
    state->threads.emplace_back([c = state->contexts[i].get()] { c->run(); });
  }
  return std::unique_ptr<http_server>(new http_server(std::move(state)));
}

http_server::http_server(std::unique_ptr<impl> state) : impl_(std::move(state)) {}

http_server::~http_server() {
  asio::post(*impl_->contexts.front(), [s = impl_.get()] {
    beast::error_code ignored;
    s->acceptor->close(ignored);
    s->accept_pause->cancel();
  });
  // Answers on their way are posted to the context: wait for them (the model server answers every
  // request, in the worst case with cancelled), then stop; pending handlers drop their sessions.
  while (impl_->ctx->outstanding.load() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (auto& context : impl_->contexts) context->stop();
  for (auto& t : impl_->threads) t.join();
}

uint16_t http_server::port() const { return impl_->acceptor->local_endpoint().port(); }

}  // namespace af::serving
