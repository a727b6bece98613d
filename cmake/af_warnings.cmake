# One interface target carrying the project's warning flags; every library and program links it.
# -Wshadow=local is GCC's spelling; clang (the fuzz tree) knows only -Wshadow, which also flags
# members and globals, so it gets none. The flags stay in this order: ccache hashes the command line.
add_library(af_warnings INTERFACE)
target_compile_options(af_warnings INTERFACE
  -Wall -Wextra -Wpedantic $<$<CXX_COMPILER_ID:GNU>:-Wshadow=local> -Wnon-virtual-dtor -Wcast-align
  -Wno-missing-field-initializers)
