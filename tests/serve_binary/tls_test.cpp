// `actorflow serve --ssl_config_file` (TF Serving's SSLConfig): REST and gRPC speak TLS with a
// certificate made in the test; with client_verify, a client that presents no certificate signed by
// custom_ca is refused by both, and one that does is served. A config that does not fit stops
// the server at start, naming the file.

#include <catch2/catch.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <string>

#include "../support/test_certificates.hpp"
#include "served_binary.hpp"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

using namespace af;
using namespace af::testing;
namespace tfs = tensorflow::serving;

namespace {

const std::string predict_body = R"({"instances": [[1.0, 2.0, 3.0, 4.0]]})";
const std::string predict_request_text = std::string{"POST /v1/models/dense:predict HTTP/1.1\r\nHost: localhost\r\n"} +
                                         "Authorization: Bearer " + served::token + "\r\nContent-Length: " +
                                         std::to_string(predict_body.size()) + "\r\nConnection: close\r\n\r\n" + predict_body;

// A PEM text as a protobuf text-format string literal.
std::string quoted(const std::string& pem) {
  std::string out = "\"";
  for (char c : pem) out += c == '\n' ? std::string{"\\n"} : std::string(1, c);
  return out + "\"";
}

// What an HTTPS exchange got: whether the handshake completed, and the answer read.
struct https_result {
  bool handshake = false;
  std::string answer;
};

// One request over TLS to 127.0.0.1:port, verifying the server against `ca` as "localhost";
// presents `client` when it has a key.
https_result https_exchange(int port, const std::string& ca, const pem_identity& client, const std::string& request) {
  https_result out;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  REQUIRE(ctx);
  BIO* ca_bio = BIO_new_mem_buf(ca.data(), static_cast<int>(ca.size()));
  X509* ca_cert = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr);
  REQUIRE(ca_cert);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca_cert);
  X509_free(ca_cert);
  BIO_free(ca_bio);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!client.key.empty()) {
    BIO* key_bio = BIO_new_mem_buf(client.key.data(), static_cast<int>(client.key.size()));
    BIO* cert_bio = BIO_new_mem_buf(client.cert.data(), static_cast<int>(client.cert.size()));
    EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
    X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
    REQUIRE(SSL_CTX_use_certificate(ctx, cert) == 1);
    REQUIRE(SSL_CTX_use_PrivateKey(ctx, key) == 1);
    EVP_PKEY_free(key);
    X509_free(cert);
    BIO_free(key_bio);
    BIO_free(cert_bio);
  }
  const int fd = connect_loopback(port);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set1_host(ssl, "localhost");
  SSL_set_tlsext_host_name(ssl, "localhost");
  out.handshake = SSL_connect(ssl) == 1;
  if (out.handshake && SSL_write(ssl, request.data(), static_cast<int>(request.size())) == static_cast<int>(request.size())) {
    char buf[4096];
    for (int n; (n = SSL_read(ssl, buf, sizeof buf)) > 0;) out.answer.append(buf, static_cast<std::size_t>(n));
  }
  ERR_clear_error();
  SSL_free(ssl);
  ::close(fd);
  SSL_CTX_free(ctx);
  return out;
}

grpc::Status grpc_predict(int port, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  // The address as an IP literal with the certificate's name checked as "localhost": a name to
  // resolve would go through c-ares, which leaks a few bytes per lookup (LeakSanitizer says so).
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  auto stub = tfs::PredictionService::NewStub(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), credentials, args));
  tfs::PredictRequest request;
  request.mutable_model_spec()->set_name("dense");
  auto& x = (*request.mutable_inputs())["x"];
  x.set_dtype(tensorflow::DT_FLOAT);
  x.mutable_tensor_shape()->add_dim()->set_size(1);
  x.mutable_tensor_shape()->add_dim()->set_size(4);
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) x.add_float_val(v);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  ctx.AddMetadata("authorization", std::string{"Bearer "} + served::token);
  tfs::PredictResponse response;
  return stub->Predict(&ctx, request, &response);
}

std::shared_ptr<grpc::ChannelCredentials> tls_credentials(const test_certificates& certs, bool with_client_certificate) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = certs.authority.cert;
  if (with_client_certificate) {
    options.pem_private_key = certs.client.key;
    options.pem_cert_chain = certs.client.cert;
  }
  return grpc::SslCredentials(options);
}

// An SSLConfig file in a scratch directory that outlives the server started with it.
struct ssl_config_file {
  scratch_dir dir{"af_tls"};
  std::string path;
  ssl_config_file(const test_certificates& certs, bool client_verify) : path((dir.path / "ssl.conf").string()) {
    std::ofstream{path} << "server_key: " << quoted(certs.server.key) << "\nserver_cert: " << quoted(certs.server.cert)
                        << "\ncustom_ca: " << quoted(certs.authority.cert) << "\nclient_verify: " << (client_verify ? "true" : "false")
                        << "\n";
  }
};

}  // namespace

TEST_CASE("with --ssl_config_file, REST and gRPC speak TLS only", "[serve][tls]") {
  const auto certs = make_test_certificates();
  ssl_config_file config{certs, false};
  served s{{"--ssl_config_file=" + config.path}};
  auto https = https_exchange(s.rest, certs.authority.cert, {}, predict_request_text);
  REQUIRE(https.handshake);
  CHECK_THAT(https.answer, Catch::StartsWith("HTTP/1.1 200") && Catch::Contains("predictions"));
  // Plain HTTP on the TLS port gets no HTTP answer.
  CHECK_THAT(send_raw(s.rest, predict_request_text), !Catch::Contains("HTTP/1.1"));
  CHECK(grpc_predict(s.grpc, tls_credentials(certs, false)).ok());
  CHECK(grpc_predict(s.grpc, grpc::InsecureChannelCredentials()).error_code() == grpc::StatusCode::UNAVAILABLE);
  // A client that trusts another authority refuses the server.
  const auto strangers = make_test_certificates();
  CHECK_FALSE(https_exchange(s.rest, strangers.authority.cert, {}, predict_request_text).handshake);
  CHECK(s.stop() == 0);
}

TEST_CASE("with client_verify, a client without a certificate from custom_ca is refused on REST and gRPC", "[serve][tls]") {
  const auto certs = make_test_certificates();
  ssl_config_file config{certs, true};
  served s{{"--ssl_config_file=" + config.path}};
  // Without a certificate: no answer (TLS 1.3 may finish the client's side of the handshake
  // before the server's refusal arrives, so the answer is what is checked).
  CHECK_THAT(https_exchange(s.rest, certs.authority.cert, {}, predict_request_text).answer, !Catch::Contains("HTTP/1.1"));
  // With one signed by another authority: refused too.
  const auto strangers = make_test_certificates();
  CHECK_THAT(https_exchange(s.rest, certs.authority.cert, strangers.client, predict_request_text).answer, !Catch::Contains("HTTP/1.1"));
  auto served_answer = https_exchange(s.rest, certs.authority.cert, certs.client, predict_request_text);
  CHECK_THAT(served_answer.answer, Catch::StartsWith("HTTP/1.1 200"));
  CHECK_FALSE(grpc_predict(s.grpc, tls_credentials(certs, false)).ok());
  CHECK(grpc_predict(s.grpc, tls_credentials(certs, true)).ok());
  CHECK(s.stop() == 0);
}

TEST_CASE("an SSLConfig that does not fit stops actorflow serve at start, naming the file and field", "[serve][tls]") {
  scratch_dir dir{"af_tls_bad"};
  const auto certs = make_test_certificates();
  const auto model = dir.path / "models" / "dense";
  save_version(model, 1, 7);
  auto start = [&](const std::string& text) {
    std::ofstream{dir.path / "ssl.conf"} << text;
    return run_program({AF_ACTORFLOW_PATH, "serve", "--model_name=dense", "--model_base_path=" + model.string(), "--port=-1",
                        "--ssl_config_file=" + (dir.path / "ssl.conf").string()},
                       dir.path, std::chrono::seconds(60));
  };
  auto path_not_pem = start("server_key: \"/etc/ssl/server.key\"\nserver_cert: " + quoted(certs.server.cert) + "\n");
  CHECK(path_not_pem.exit_code == 1);
  CHECK_THAT(path_not_pem.err, Catch::Contains("ssl.conf:1:1") && Catch::Contains("server_key is not PEM text"));
  auto verify_without_ca = start("server_key: " + quoted(certs.server.key) + "\nserver_cert: " + quoted(certs.server.cert) +
                                 "\nclient_verify: true\n");
  CHECK(verify_without_ca.exit_code == 1);
  CHECK_THAT(verify_without_ca.err, Catch::Contains("client_verify needs custom_ca"));
  auto mismatched = start("server_key: " + quoted(certs.client.key) + "\nserver_cert: " + quoted(certs.server.cert) + "\n");
  CHECK(mismatched.exit_code == 1);
  CHECK_THAT(mismatched.err, Catch::Contains("TLS"));
  auto garbage = start("server_key: 12 {");
  CHECK(garbage.exit_code == 1);
  CHECK_THAT(garbage.err, Catch::Contains("ssl.conf:1"));
}
