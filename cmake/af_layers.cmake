# Layering is enforced by the build: each library sees only its own folder and the folders of the
# libraries it links. af_add_layer(ops) makes ${build}/layers/ops/ops -> ${source}/ops and exposes
# ${build}/layers/ops as that library's include root, so "#include "actors/x.hpp"" from ops/ fails.
function(af_layer_include_root folder out_var)
  set(root ${PROJECT_BINARY_DIR}/layers/${folder})
  file(MAKE_DIRECTORY ${root})
  if(NOT EXISTS ${root}/${folder})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  set(${out_var} ${root} PARENT_SCOPE)
endfunction()

function(af_add_layer folder)
  cmake_parse_arguments(ARG "" "" "SOURCES;LINKS;PRIVATE_LINKS" ${ARGN})
  af_layer_include_root(${folder} root)
  add_library(af_${folder} ${ARG_SOURCES})
  add_library(actorflow::${folder} ALIAS af_${folder})
  target_include_directories(af_${folder} PUBLIC $<BUILD_INTERFACE:${root}>)
  target_link_libraries(af_${folder} PUBLIC ${ARG_LINKS} PRIVATE af_warnings ${ARG_PRIVATE_LINKS})
endfunction()
