# AF_BUILD_FUZZERS=ON makes a fuzz tree: ops, serialization and the libFuzzer targets of
# tests/fuzz/, nothing else (the top-level CMakeLists.txt stops after them). libFuzzer ships with
# clang only (Debian: clang-14 + libclang-rt-14-dev). Everything in the tree carries the fuzzer's
# coverage instrumentation plus ASan+UBSan, so a bug deep inside ops that a parser reaches is found
# too; only the fuzz targets link libFuzzer's main (-fsanitize=fuzzer, tests/fuzz/CMakeLists.txt).
if(NOT AF_BUILD_FUZZERS)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "AF_BUILD_FUZZERS needs clang, which ships libFuzzer: "
                      "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ (scripts/fuzz does this)")
endif()
if(AF_SANITIZE STREQUAL "thread")
  message(FATAL_ERROR "AF_BUILD_FUZZERS runs under ASan+UBSan; it cannot be combined with AF_SANITIZE=thread")
endif()
# -Wno-psabi: without -march, clang notes that ops' AVX vector helpers would pass differently; they
# never cross a boundary between differently compiled code.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -O1 -g -Wno-psabi)
add_link_options(-fsanitize=address,undefined)
# The parsers never touch a GPU, and CUDA's runtime under ASan only slows every fuzzer start.
set(AF_ENABLE_CUDA OFF)
