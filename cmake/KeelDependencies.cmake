# The engine's external libraries as imported targets. Keel's own build and the installed
# KeelConfig.cmake both call this, so the exported engine names the same targets a consumer
# gets from find_package(Keel):
#
#   keel::flatbuffers  FlatBuffers' headers (the generated schema header includes them)
#   keel::pthreadpool  pthreadpool (hosted builds)
#   keel::xnnpack      XNNPACK (builds with KEEL_WITH_XNNPACK)
#
#   keel_find_dependencies(PTHREADPOOL <bool> XNNPACK <bool> [GLOBAL])
#
# Sets KEEL_DEPENDENCIES_MISSING to a message naming what was not found (empty when all was).
# GLOBAL makes the targets visible in every directory (Keel's build defines them in engine/).
function(keel_find_dependencies)
  cmake_parse_arguments(PARSE_ARGV 0 KFD "GLOBAL" "PTHREADPOOL;XNNPACK" "")
  set(scope "")
  if(KFD_GLOBAL)
    set(scope GLOBAL)
  endif()
  set(missing "")

  find_path(FLATBUFFERS_INCLUDE_DIR flatbuffers/flatbuffers.h)
  if(NOT FLATBUFFERS_INCLUDE_DIR)
    list(APPEND missing "flatbuffers/flatbuffers.h (set FLATBUFFERS_INCLUDE_DIR)")
  elseif(NOT TARGET keel::flatbuffers)
    add_library(keel::flatbuffers INTERFACE IMPORTED ${scope})
    set_target_properties(keel::flatbuffers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${FLATBUFFERS_INCLUDE_DIR}")
  endif()

  if(KFD_PTHREADPOOL)
    _keel_find_library(pthreadpool pthreadpool.h pthreadpool PTHREADPOOL "${scope}")
  endif()
  if(KFD_XNNPACK)
    _keel_find_library(xnnpack xnnpack.h XNNPACK XNNPACK "${scope}")
  endif()
  set(KEEL_DEPENDENCIES_MISSING "${missing}" PARENT_SCOPE)
endfunction()

# Defines keel::<name> from <header> and lib<library>; appends to `missing` in the caller.
macro(_keel_find_library name header library prefix scope)
  find_path(${prefix}_INCLUDE_DIR ${header})
  find_library(${prefix}_LIBRARY ${library})
  if(NOT ${prefix}_INCLUDE_DIR OR NOT ${prefix}_LIBRARY)
    list(APPEND missing "${library} (${header} and lib${library}; set ${prefix}_INCLUDE_DIR and ${prefix}_LIBRARY)")
  elseif(NOT TARGET keel::${name})
    add_library(keel::${name} UNKNOWN IMPORTED ${scope})
    set_target_properties(keel::${name} PROPERTIES IMPORTED_LOCATION "${${prefix}_LIBRARY}"
                                                   INTERFACE_INCLUDE_DIRECTORIES "${${prefix}_INCLUDE_DIR}")
  endif()
endmacro()
