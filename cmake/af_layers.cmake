# Layering is enforced by the build: each library sees only its own folder and the folders of the
# libraries it links. af_add_layer(ops) makes ${build}/layers/ops/ops -> ${source}/ops and exposes
# ${build}/layers/ops as that library's include root, so "#include "actors/x.hpp"" from ops/ fails.
include(GNUInstallDirs)

function(af_layer_include_root folder out_var)
  set(root ${PROJECT_BINARY_DIR}/layers/${folder})
  file(MAKE_DIRECTORY ${root})
  if(NOT EXISTS ${root}/${folder})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  set(${out_var} ${root} PARENT_SCOPE)
endfunction()

# Installed, a layer's headers live under <prefix>/include/actorflow/<folder>/. Consumers write
# <actorflow/ops/tensor.hpp>, while the headers include each other as "ops/x.hpp": the exported
# include directories are both include/ and include/actorflow/. Generated Cap'n Proto headers live
# in the build tree, not in the folder, so they stay private.
function(af_install_layer folder)
  set_target_properties(af_${folder} PROPERTIES EXPORT_NAME ${folder})
  target_include_directories(af_${folder} PUBLIC
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/actorflow>)
  install(TARGETS af_${folder} EXPORT actorflow-targets)
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
    ${PROJECT_SOURCE_DIR}/${folder}/*.hpp)
  foreach(header IN LISTS headers)
    get_filename_component(header_dir ${header} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorflow/${header_dir})
  endforeach()
endfunction()

function(af_add_layer folder)
  cmake_parse_arguments(ARG "" "" "SOURCES;LINKS;PRIVATE_LINKS" ${ARGN})
  af_layer_include_root(${folder} root)
  add_library(af_${folder} ${ARG_SOURCES})
  add_library(actorflow::${folder} ALIAS af_${folder})
  target_include_directories(af_${folder} PUBLIC $<BUILD_INTERFACE:${root}>)
  # A static library's private links are exported for the final link; the warning flags are ours,
  # not the consumer's, so af_warnings stays out of the export.
  target_link_libraries(af_${folder} PUBLIC ${ARG_LINKS}
    PRIVATE $<BUILD_INTERFACE:af_warnings> ${ARG_PRIVATE_LINKS})
  af_install_layer(${folder})
endfunction()
