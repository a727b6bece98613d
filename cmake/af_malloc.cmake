# af_program_malloc: what actorflow's programs (the command line, benchmarks, examples) link for
# malloc. An input pipeline allocates small objects on one thread and frees them on another at
# hundreds of thousands per second; glibc's malloc serialises those frees on the allocating
# thread's arena lock and spent ~20% of bench_pipeline's CPU there, jemalloc's thread caches do
# not (bench_pipeline: 0.51 -> 0.62 of the raw loop, which runs on the same malloc). The libraries
# themselves link no malloc: applications embedding them choose their own.
# AF_PROGRAM_MALLOC=system keeps glibc's; sanitizer builds always do (they replace malloc).
set(AF_PROGRAM_MALLOC "jemalloc" CACHE STRING "malloc linked into actorflow's programs: jemalloc or system")
add_library(af_program_malloc INTERFACE)
if(AF_PROGRAM_MALLOC STREQUAL "jemalloc" AND AF_SANITIZE STREQUAL "")
  find_library(AF_JEMALLOC_LIBRARY jemalloc)
  if(AF_JEMALLOC_LIBRARY)
    target_link_libraries(af_program_malloc INTERFACE ${AF_JEMALLOC_LIBRARY})
    message(STATUS "actorflow programs link jemalloc: ${AF_JEMALLOC_LIBRARY}")
  else()
    message(WARNING "jemalloc not found (Debian: libjemalloc-dev): programs use glibc's malloc")
  endif()
elseif(NOT AF_PROGRAM_MALLOC MATCHES "^(jemalloc|system)$")
  message(FATAL_ERROR "AF_PROGRAM_MALLOC must be 'jemalloc' or 'system', not '${AF_PROGRAM_MALLOC}'")
endif()
