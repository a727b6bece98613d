#pragma once

#include "apps/node_commands.hpp"

/// Entry points of the actorflow subcommands; argv[0] is the command name.
namespace af::apps {

int run_info(int argc, char** argv);
int run_demo(int argc, char** argv);
int run_topology_demo(int argc, char** argv);
int run_records(int argc, char** argv);
int run_digits(int argc, char** argv);
int run_saved_model(int argc, char** argv);
int run_import(int argc, char** argv);
int run_serve(int argc, char** argv);

}  // namespace af::apps
