# `cmake --install <build>` gives a CMake package: find_package(actorflow CONFIG) yields one imported
# target per layer (actorflow::ops ... actorflow::training); af_add_layer installs each layer.
include(CMakePackageConfigHelpers)
set(AF_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/actorflow)
install(EXPORT actorflow-targets NAMESPACE actorflow:: FILE actorflowTargets.cmake
  DESTINATION ${AF_PACKAGE_DIR})

# The config finds the toolkit this build used (consumers may still set CUDAToolkit_ROOT).
set(AF_CUDA_TOOLKIT_ROOT "")
if(AF_HAVE_CUDA)
  get_filename_component(AF_CUDA_TOOLKIT_ROOT ${CUDAToolkit_BIN_DIR} DIRECTORY)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/actorflowConfig.cmake.in
  ${PROJECT_BINARY_DIR}/actorflowConfig.cmake INSTALL_DESTINATION ${AF_PACKAGE_DIR})
# Before 1.0 a minor release may break the API, so only the same minor version satisfies a request.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/actorflowConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/actorflowConfig.cmake
  ${PROJECT_BINARY_DIR}/actorflowConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
  DESTINATION ${AF_PACKAGE_DIR})
