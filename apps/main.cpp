// The actorflow command line: `actorflow <command> [args]`. Each command lives in its own file.

#include <cstdio>
#include <cstring>
#include <string_view>

#include "apps/commands.hpp"

namespace {

struct command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

const command commands[] = {
    {"info", "version, CPU thread budget and GPU availability", af::apps::run_info},
    {"demo", "train a CNN on the 8x8 digits through the TFRecord pipeline; test accuracy, trace, report",
     af::apps::run_demo},
    {"topology-demo", "tensors flowing through an actor topology, with a trace and a bottleneck report",
     af::apps::run_topology_demo},
    {"node", "exchange tensors between two processes: node receive PORT | node send HOST PORT",
     af::apps::run_node},
    {"records", "look into TFRecord files: records cat|verify|count FILE...", af::apps::run_records},
    {"digits", "sklearn's 8x8 digits CSV to train/test TFRecords: digits [--csv PATH] [--out DIR]",
     af::apps::run_digits},
    {"saved_model", "look into and run SavedModel directories: saved_model show|run --dir DIR ...",
     af::apps::run_saved_model},
    {"import", "bring a model in: import keras MODEL.keras OUT_DIR (a SavedModel)", af::apps::run_import},
    {"serve", "serve SavedModels over TF Serving's REST and gRPC APIs: serve --model_base_path=DIR ...",
     af::apps::run_serve},
};

int usage(FILE* out) {
  std::fprintf(out, "usage: actorflow <command> [args]\n\ncommands:\n");
  for (const auto& c : commands) std::fprintf(out, "  %-14s %s\n", c.name, c.summary);
  return out == stderr ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") return usage(stdout);
  for (const auto& c : commands)
    if (name == c.name) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "actorflow: unknown command '%s'\n\n", argv[1]);
  return usage(stderr);
}
