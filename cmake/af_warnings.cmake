# One interface target carrying the project's warning flags; every library and program links it.
add_library(af_warnings INTERFACE)
target_compile_options(af_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor -Wcast-align
  -Wno-missing-field-initializers)
