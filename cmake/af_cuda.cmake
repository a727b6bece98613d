# The CUDA backend is built whenever the toolkit is present (AUTO) or demanded (ON). We use only the
# runtime API, NVRTC and cuBLAS from .cpp files: the binaries start on machines without a driver.
set(AF_HAVE_CUDA OFF)
if(NOT AF_ENABLE_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  # NVRTC by file, not CUDA::nvrtc: that target drags in libcuda.so.1 (the driver), which machines
  # without a GPU lack, and then no binary starts (seen in sanitizer builds, which ignore --as-needed).
  find_library(AF_NVRTC_LIBRARY nvrtc HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart AND AF_NVRTC_LIBRARY)
    set(AF_HAVE_CUDA ON)
  elseif(AF_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "AF_ENABLE_CUDA=ON but the CUDA toolkit (cudart, nvrtc) was not found")
  endif()
endif()
message(STATUS "actorflow CUDA backend: ${AF_HAVE_CUDA}")
