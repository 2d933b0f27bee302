# Installs the build tree into one prefix and moves it elsewhere (WORK/moved): the
# consumers then build against the moved copy, so the package must be relocatable.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK}/first
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed")
endif()
file(RENAME ${WORK}/first ${WORK}/moved)
