# CAF 0.17 as packaged by Debian ships neither a CMake config nor a pkg-config file.
# CAF_ROOT names another installation to use instead, only that one: the ThreadSanitizer build
# made by scripts/build_caf_tsan. Results an earlier configure found elsewhere are dropped.
set(_caf_search)
if(CAF_ROOT)
  foreach(var CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
    if(${var} AND NOT ${var} MATCHES "^${CAF_ROOT}/")
      unset(${var} CACHE)
    endif()
  endforeach()
  set(_caf_search PATHS ${CAF_ROOT} NO_DEFAULT_PATH)
endif()
find_path(CAF_INCLUDE_DIR caf/all.hpp ${_caf_search} PATH_SUFFIXES include)
find_library(CAF_CORE_LIBRARY caf_core ${_caf_search} PATH_SUFFIXES lib lib64)
find_library(CAF_IO_LIBRARY caf_io ${_caf_search} PATH_SUFFIXES lib lib64)
find_library(CAF_OPENSSL_LIBRARY caf_openssl ${_caf_search} PATH_SUFFIXES lib lib64)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY)

if(CAF_FOUND AND NOT TARGET CAF::core)
  find_package(Threads REQUIRED)
  add_library(CAF::core UNKNOWN IMPORTED)
  set_target_properties(CAF::core PROPERTIES
    IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(CAF::io UNKNOWN IMPORTED)
  set_target_properties(CAF::io PROPERTIES
    IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
    INTERFACE_LINK_LIBRARIES CAF::core)
  if(CAF_OPENSSL_LIBRARY)
    find_package(OpenSSL REQUIRED)
    add_library(CAF::openssl UNKNOWN IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
      INTERFACE_LINK_LIBRARIES "CAF::io;OpenSSL::SSL;OpenSSL::Crypto")
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY CAF_OPENSSL_LIBRARY)
