# The engine's layering (engine/CMakeLists.txt): the engine sees engine/ and the generated schema
# header alone, so `#include "tools/..."` or `"ports/..."` in an engine file already fails to
# compile. This check also fails on what the include path cannot stop: a relative path that
# climbs out of engine/ ("../../tools/...") or one that names another directory of the
# repository (tools/, ports/, tests/, bench/, scripts/, schema/, engine/ itself) or a tools-side
# library as the tools spell it (convert/, emulate/: the emulator's hardware descriptions and
# cost model, which the engine's dataflow backend must not see).
#
#   cmake -DENGINE_DIR=<repo>/engine -P engine_includes.cmake
get_filename_component(ENGINE_DIR "${ENGINE_DIR}" ABSOLUTE)
if(NOT IS_DIRECTORY "${ENGINE_DIR}")
  message(FATAL_ERROR "engine_includes: ENGINE_DIR: expected the engine's source directory, got '${ENGINE_DIR}'")
endif()
file(GLOB_RECURSE files "${ENGINE_DIR}/*.h" "${ENGINE_DIR}/*.hpp" "${ENGINE_DIR}/*.cpp" "${ENGINE_DIR}/*.c")
list(LENGTH files count)
if(count LESS 10)
  message(FATAL_ERROR "engine_includes: found ${count} source files under ${ENGINE_DIR}; expected the engine")
endif()
set(bad "")
foreach(file IN LISTS files)
  file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
  get_filename_component(dir "${file}" DIRECTORY)
  foreach(line IN LISTS lines)
    set(outside FALSE)
    if(line MATCHES "#[ \t]*include[ \t]*[\"<](\\./)*(tools|ports|tests|bench|engine|schema|scripts|convert|emulate)/")
      set(outside TRUE)
    elseif(line MATCHES "#[ \t]*include[ \t]*\"(\\.\\.?/[^\"]*)\"")
      # relative to the including file: must stay inside engine/
      get_filename_component(target "${dir}/${CMAKE_MATCH_1}" ABSOLUTE)
      string(FIND "${target}" "${ENGINE_DIR}/" at)
      if(NOT at EQUAL 0)
        set(outside TRUE)
      endif()
    endif()
    if(outside)
      file(RELATIVE_PATH rel "${ENGINE_DIR}" "${file}")
      string(STRIP "${line}" line)
      list(APPEND bad "  engine/${rel}: ${line}")
    endif()
  endforeach()
endforeach()
if(bad)
  string(REPLACE ";" "\n" bad "${bad}")
  message(FATAL_ERROR "engine_includes: engine files include from outside the engine (the engine sees engine/ "
                      "and the generated keel_generated.h only):\n${bad}")
endif()
message(STATUS "engine_includes: ${count} engine files include only the engine, the schema and system headers")
