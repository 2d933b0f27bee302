# MLIR/LLVM from the Debian llvm-22 packages: headers and ODS generation come from the
# package's CMake config; the libraries are linked as static archives (the package's
# imported targets would pull in the dynamic libLLVM.so).
find_program(TOKAMAX_LLVM_CONFIG_EXE NAMES llvm-config-22 llvm-config
  PATHS /usr/lib/llvm-22/bin REQUIRED DOC "llvm-config of the LLVM/MLIR 22 install")
execute_process(COMMAND ${TOKAMAX_LLVM_CONFIG_EXE} --prefix
  OUTPUT_VARIABLE TOKAMAX_LLVM_PREFIX OUTPUT_STRIP_TRAILING_WHITESPACE)
execute_process(COMMAND ${TOKAMAX_LLVM_CONFIG_EXE} --version
  OUTPUT_VARIABLE TOKAMAX_LLVM_VERSION OUTPUT_STRIP_TRAILING_WHITESPACE)
find_package(MLIR REQUIRED CONFIG PATHS ${TOKAMAX_LLVM_PREFIX}/lib/cmake/mlir NO_DEFAULT_PATH)
list(APPEND CMAKE_MODULE_PATH ${MLIR_CMAKE_DIR} ${LLVM_CMAKE_DIR})
include(TableGen)
include(AddLLVM)
include(AddMLIR)
set(TOKAMAX_LLVM_BIN ${TOKAMAX_LLVM_PREFIX}/bin)

execute_process(COMMAND ${TOKAMAX_LLVM_CONFIG_EXE} --link-static --libs
    nvptx core passes target ipo irreader bitwriter transformutils frontendopenmp
    frontendoffloading
  OUTPUT_VARIABLE TOKAMAX_LLVM_STATIC_LIBS OUTPUT_STRIP_TRAILING_WHITESPACE)
separate_arguments(TOKAMAX_LLVM_STATIC_LIBS)
file(GLOB TOKAMAX_MLIR_ARCHIVES ${TOKAMAX_LLVM_PREFIX}/lib/libMLIR*.a)
list(FILTER TOKAMAX_MLIR_ARCHIVES EXCLUDE REGEX "libMLIR(CAPI|.*Test|.*Python|ExecutionEngine|JitRunner).*")

# Compiles `target` against MLIR headers (privately) and links the archives into it.
function(tokamax_use_mlir_headers target)
  target_include_directories(${target} SYSTEM PRIVATE ${MLIR_INCLUDE_DIRS} ${LLVM_INCLUDE_DIRS})
  target_compile_definitions(${target} PRIVATE ${LLVM_DEFINITIONS})
endfunction()

function(tokamax_link_mlir target)
  tokamax_use_mlir_headers(${target})
  target_link_directories(${target} PRIVATE ${TOKAMAX_LLVM_PREFIX}/lib)
  target_link_libraries(${target} PRIVATE -Wl,--start-group ${TOKAMAX_MLIR_ARCHIVES}
    ${TOKAMAX_LLVM_STATIC_LIBS} -Wl,--end-group -l:libzstd.so.1 z)
endfunction()
