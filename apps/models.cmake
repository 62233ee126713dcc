# Data and model code for the built-in training apps: the Fashion-MNIST
# loader, epoch partitioning and data cursors, synthetic data, logistic
# regression, the MLP and matrix factorization, and the compute backends
# the MLP runs on (OpenBLAS on the CPU; CUDA + cuBLAS when available).
# Independent of the network and client code. Included from
# apps/CMakeLists.txt.
#
# DUCTILE_WITH_CUDA: AUTO (default) builds the CUDA backend if nvcc is found
# (on PATH, through CUDACXX or CMAKE_CUDA_COMPILER, or at
# /usr/local/cuda/bin/nvcc); ON requires it; OFF never builds it. Without
# it, MakeComputeBackend("cuda") returns FailedPrecondition. The kernels are
# compiled for CMAKE_CUDA_ARCHITECTURES, 90 (H100/H200) unless set: not
# "native", which fails on machines without a GPU.
set(DUCTILE_WITH_CUDA AUTO CACHE STRING
    "Build the CUDA compute backend: AUTO (if nvcc is found), ON, OFF")
set_property(CACHE DUCTILE_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)

find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)

set(ductile_models_cuda FALSE)
if(DUCTILE_WITH_CUDA STREQUAL "AUTO" OR DUCTILE_WITH_CUDA)
  include(CheckLanguage)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    # Name the compiler for check_language() through CUDACXX: nvcc on PATH,
    # else the toolkit's default place. Left to itself, CMake 3.25 also
    # searches directories off PATH and can pick a wrapper there that its
    # compiler detection then fails on.
    find_program(ductile_nvcc nvcc NO_CACHE NO_DEFAULT_PATH PATHS ENV PATH)
    if(NOT ductile_nvcc AND EXISTS /usr/local/cuda/bin/nvcc)
      set(ductile_nvcc /usr/local/cuda/bin/nvcc)
    endif()
    if(ductile_nvcc)
      set(ENV{CUDACXX} ${ductile_nvcc})
    endif()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures")
    endif()
    # Every target that links the kernels gets the shared runtime, the one
    # CUDA::cudart names, rather than a second, static copy.
    if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
      set(CMAKE_CUDA_RUNTIME_LIBRARY Shared CACHE STRING "CUDA runtime library")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublas)
      set(ductile_models_cuda TRUE)
    endif()
  endif()
  if(NOT ductile_models_cuda AND NOT DUCTILE_WITH_CUDA STREQUAL "AUTO")
    message(FATAL_ERROR "DUCTILE_WITH_CUDA=${DUCTILE_WITH_CUDA} but no "
            "working nvcc with cuBLAS was found")
  endif()
endif()
message(STATUS "ductile: CUDA compute backend: ${ductile_models_cuda}")

add_library(ductile_models STATIC
  ${CMAKE_CURRENT_LIST_DIR}/fmnist_data.cc
  ${CMAKE_CURRENT_LIST_DIR}/logreg_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/data_cursor.cc
  ${CMAKE_CURRENT_LIST_DIR}/compute_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/mlp_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/mf_model.cc)
target_include_directories(ductile_models PUBLIC
  ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(ductile_models PUBLIC ZLIB::ZLIB
                      PRIVATE PkgConfig::OPENBLAS)

if(ductile_models_cuda)
  # The kernels are the only code nvcc compiles, as C++17 (CMake 3.25 has
  # no CUDA C++20). They go in as plain objects, so that targets linking
  # ductile_models are linked by the C++ compiler like any other. The
  # directory's options (-Wall, sanitizers) are host-compiler flags that
  # nvcc does not take: pass the warnings through -Xcompiler, and leave the
  # sanitizers out (uninstrumented objects link into a sanitized program).
  add_library(ductile_cuda_kernels OBJECT
    ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels.cu)
  set_target_properties(ductile_cuda_kernels PROPERTIES
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
    COMPILE_OPTIONS "-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter")
  target_include_directories(ductile_cuda_kernels PRIVATE ${PROJECT_SOURCE_DIR})
  target_sources(ductile_models PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cc
    $<TARGET_OBJECTS:ductile_cuda_kernels>)
  # The kernels' objects make CMake treat ductile_models as CUDA for
  # linking, and the CUDA dialect defaults to the C++ one (20).
  set_target_properties(ductile_models PROPERTIES CUDA_STANDARD 17)
  target_compile_definitions(ductile_models PUBLIC DUCTILE_WITH_CUDA=1)
  target_link_libraries(ductile_models PRIVATE CUDA::cudart CUDA::cublas)
endif()
