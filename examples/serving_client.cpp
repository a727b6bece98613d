// A C++ client of `actorflow serve --actor_port=P`: the server's batching topology reached as a CAF
// actor from another process, tensors sent as messages (no JSON, no protobuf).
//
//   ./build/apps/actorflow serve --model_name=digits --model_base_path=$PWD/actorflow_demo_model
//       --actor_port=8502 --port=0 &      (one command line)
//   ./build/examples/serving_client 127.0.0.1 8502 digits
//
// Prints the model's versions, the signature it serves and the outputs for two rows of zeros.

#include <cstdio>
#include <string>

#include "actors/runtime.hpp"
#include "actors/serving_client.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: serving_client HOST PORT MODEL\n");
    return 2;
  }
  af::runtime rt{{.network = true}};
  auto client = af::serving::client::connect(rt, argv[1], static_cast<uint16_t>(std::stoi(argv[2])));
  if (!client) {
    std::fprintf(stderr, "serving_client: %s\n", client.error_value().message.c_str());
    return 1;
  }
  const std::string model = argv[3];

  auto versions = client->status(model);
  if (!versions) {
    std::fprintf(stderr, "serving_client: %s\n", versions.error_value().message.c_str());
    return 1;
  }
  for (const auto& v : *versions) std::printf("version %lld: %s\n", static_cast<long long>(v.version), to_string(v.state));

  auto metadata = client->metadata({.name = model});
  if (!metadata) {
    std::fprintf(stderr, "serving_client: %s\n", metadata.error_value().message.c_str());
    return 1;
  }
  const auto& signature = metadata->second.front();
  std::printf("signature '%s' of version %lld\n", signature.name.c_str(), static_cast<long long>(metadata->first));

  // Two rows of zeros for every input (open dims get 1).
  std::vector<af::named_tensor> inputs;
  for (const auto& spec : signature.inputs) {
    af::shape dims = spec.type.dims;
    dims[0] = 2;
    for (auto& d : dims) d = d < 0 ? 1 : d;
    inputs.push_back({spec.name, af::tensor::zeros(dims, spec.type.type).value()});
    std::printf("input '%s': %s\n", spec.name.c_str(), af::graph::to_string(af::graph::value_type{spec.type.type, dims}).c_str());
  }
  auto answer = client->predict({.name = model, .signature_name = signature.name}, std::move(inputs));
  if (!answer) {
    std::fprintf(stderr, "serving_client: %s\n", answer.error_value().message.c_str());
    return 1;
  }
  for (const auto& out : answer->outputs)
    std::printf("output '%s' from version %lld: %s\n", out.name.c_str(), static_cast<long long>(answer->version),
                out.value.to_string(8).c_str());
  return 0;
}
