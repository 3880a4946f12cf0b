# Writes OUTPUT, a header defining BMRT_VERSION as `git describe --always
# --dirty` of SOURCE_DIR ("unknown" outside a git checkout). Run on every
# build (runtime/CMakeLists.txt); the header changes only when the
# description does, so nothing recompiles otherwise.
set(version "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE result)
  if(result EQUAL 0 AND described)
    set(version "${described}")
  endif()
endif()
file(WRITE ${OUTPUT}.new "#define BMRT_VERSION \"${version}\"\n")
configure_file(${OUTPUT}.new ${OUTPUT} COPYONLY)
