# Configures, builds and runs the consumer in SOURCE_DIR against the package that
# install_package.cmake put in WORK/moved (ARGS: its arguments, a ;-list).
# With RUNTIME_ONLY set, the consumer and everything it loads must not include libtokamax
# or any LLVM / MLIR library, and libtokamax_runtime must hold no LLVM / MLIR symbol.
get_filename_component(name ${SOURCE_DIR} NAME)
set(build ${WORK}/${name}-build)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} -G Ninja
                        -DCMAKE_PREFIX_PATH=${WORK}/moved RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring ${name} failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${build} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building ${name} failed")
endif()

if(RUNTIME_ONLY)
  file(GET_RUNTIME_DEPENDENCIES EXECUTABLES ${build}/${name}
       RESOLVED_DEPENDENCIES_VAR loaded UNRESOLVED_DEPENDENCIES_VAR unresolved
       DIRECTORIES ${WORK}/moved/lib)
  if(unresolved)
    message(FATAL_ERROR "${name}: unresolved libraries: ${unresolved}")
  endif()
  list(FILTER loaded INCLUDE REGEX "tokamax|LLVM|MLIR")
  if(NOT loaded MATCHES "libtokamax_runtime\\.so" OR loaded MATCHES "libtokamax\\.so|LLVM|MLIR")
    message(FATAL_ERROR "${name} must load libtokamax_runtime alone of tokamax's libraries; it loads: ${loaded}")
  endif()
  file(GLOB runtime_library ${WORK}/moved/lib/libtokamax_runtime.so.*.*.*)
  find_program(NM nm REQUIRED)
  foreach(table "" "-D")
    execute_process(COMMAND ${NM} -C ${table} ${runtime_library} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
    string(REGEX MATCH "[^\n]*(llvm|mlir)::[^\n]*" found "${symbols}")
    if(rc OR found)
      message(FATAL_ERROR "libtokamax_runtime holds an LLVM / MLIR symbol (nm ${table}): ${found}")
    endif()
  endforeach()
  file(SIZE ${runtime_library} bytes)
  message(STATUS "${name} loads only libtokamax_runtime (${bytes} bytes unstripped, no LLVM / MLIR symbol)")
endif()

execute_process(COMMAND ${build}/${name} ${ARGS} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "${name} failed (exit ${rc})")
endif()
