// `actorflow import keras MODEL.keras OUT_DIR [--overwrite]`: a Keras 3 model as a SavedModel.

#include <cstdio>
#include <string>

#include "apps/commands.hpp"
#include "serialization/keras_import.hpp"
#include "serialization/saved_model.hpp"

namespace af::apps {

int run_import(int argc, char** argv) {
  bool overwrite = false;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--overwrite") overwrite = true;
    else if (arg == "-h" || arg == "--help") positional.clear(), positional.push_back("--help");
    else positional.push_back(arg);
  }
  if (positional.size() != 3 || positional[0] != "keras") {
    std::fprintf(positional == std::vector<std::string>{"--help"} ? stdout : stderr,
                 "usage: actorflow import keras MODEL.keras OUT_DIR [--overwrite]\n"
                 "Reads a Keras 3 archive (Sequential or Functional) and writes it as a SavedModel.\n");
    return positional == std::vector<std::string>{"--help"} ? 0 : 2;
  }
  auto model = keras::import_model(positional[1]);
  if (!model) {
    std::fprintf(stderr, "actorflow import: %s\n", model.error_value().to_string().c_str());
    return 1;
  }
  if (auto saved = saved_model::save(*model, positional[2], {.overwrite = overwrite}); !saved) {
    std::fprintf(stderr, "actorflow import: %s\n", saved.error_value().to_string().c_str());
    return 1;
  }
  std::printf("imported '%s' (%lld parameters) as SavedModel '%s'\n", positional[1].c_str(),
              static_cast<long long>(model->parameter_count()), positional[2].c_str());
  return 0;
}

}  // namespace af::apps
