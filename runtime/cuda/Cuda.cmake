# The CUDA backend (runtime/cuda), included from runtime/CMakeLists.txt after
# the CPU backend. Built where nvcc is found; it needs no GPU to build, and
# available() says at run time whether one is present. Not in the fuzzing
# build: clang's sanitizers and nvcc do not mix.
option(BMRT_CUDA "Build the CUDA backend where nvcc is found" ON)
include(CheckLanguage)
check_language(CUDA)

if(NOT (BMRT_CUDA AND CMAKE_CUDA_COMPILER AND NOT BMC_FUZZ))
  message(STATUS "bmrt: CUDA backend not built (BMRT_CUDA=${BMRT_CUDA}, "
                 "nvcc: ${CMAKE_CUDA_COMPILER}, BMC_FUZZ=${BMC_FUZZ})")
  return()
endif()

# One architecture, the H100 / H200's: every kernel is compiled once per
# listed architecture, and the machines we run on are all sm_90. Pass
# -DCMAKE_CUDA_ARCHITECTURES=... for other GPUs.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# bmrt was created before CUDA was enabled, so it took neither variable as
# a default: set its properties.
set_target_properties(bmrt PROPERTIES
  CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON)

target_sources(bmrt PRIVATE
  cuda/AttentionKernels.cu
  cuda/AttentionMma.cu
  cuda/Bf16Pack.cu
  cuda/ContractionKernels.cu
  cuda/CublasLt.cpp
  cuda/CudaBackend.cpp
  cuda/CudaDevice.cpp
  cuda/DataMovementKernels.cu
  cuda/ElementwiseKernels.cu
  cuda/NormKernels.cu
  cuda/ReductionKernels.cu
  cuda/TrainerKernels.cu
)

# -O3 comes from bmrt's own options (runtime/CMakeLists.txt); relaxed
# constexpr lets device code call std::numeric_limits and friends.
target_compile_options(bmrt PRIVATE
                       $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
target_link_libraries(bmrt PUBLIC CUDA::cudart_static CUDA::cublasLt)

# NCCL's communicators (runtime/comm/NcclComm.cpp, issue 23) where nccl.h is
# found: the header at build time, libnccl.so.2 loaded at run time (dlopen),
# so that the binaries still run where NCCL is absent.
find_path(BMRT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(BMRT_NCCL_INCLUDE_DIR)
  target_sources(bmrt PRIVATE comm/NcclComm.cpp)
  target_include_directories(bmrt PRIVATE ${BMRT_NCCL_INCLUDE_DIR})
  target_compile_definitions(bmrt PRIVATE BMRT_HAVE_NCCL)
  target_link_libraries(bmrt PRIVATE ${CMAKE_DL_LIBS})
  message(STATUS "bmrt: NCCL communicators built (nccl.h in "
                 "${BMRT_NCCL_INCLUDE_DIR}; libnccl.so.2 loaded at run time)")
else()
  message(STATUS "bmrt: no nccl.h: GPU ranks stage through host memory")
endif()
list(APPEND BMRT_BACKENDS cuda)
message(STATUS "bmrt: CUDA backend built for sm_${CMAKE_CUDA_ARCHITECTURES} "
               "(CUDA ${CUDAToolkit_VERSION})")
