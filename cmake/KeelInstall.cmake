# Install rules (cmake --install BUILD --prefix P), included by the top-level CMakeLists.txt:
#
#   include/keel/keel.h, keel.hpp, backend/ core/ llm/ kv/ kernels/ model/ text/   the engine's headers
#   include/keel/keel_generated.h                                         the schema (flatc)
#   include/keel/ports/linux/*.h, include/keel/alloc_probe/alloc_probe.h  host glue, the probe
#   lib/libkeel_engine.a, lib/libkeel_port_linux.a, lib/keel/alloc_probe/ the libraries
#   bin/keel                                                              the tool
#   lib/cmake/Keel/   KeelConfig.cmake (find_package(Keel): keel::engine, keel::port_linux,
#                     keel::alloc_probe, keel::keel, keel_add_memory_check())
#   lib/pkgconfig/keel.pc
#
# include/keel is the include directory (keel::engine's and keel.pc's): a program includes
# "keel.h" or "keel.hpp" as it does when Keel is part of its build, and the engine's own
# includes ("core/check.h", "llm/runtime.h") resolve as they do in the source tree.
include(CMakePackageConfigHelpers)

set(KEEL_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/Keel)
set(_keel_inc ${CMAKE_INSTALL_INCLUDEDIR}/keel)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/engine/ DESTINATION ${_keel_inc}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
install(FILES ${KEEL_SCHEMA_HEADER} DESTINATION ${_keel_inc})
install(TARGETS keel_engine keel_schema EXPORT KeelTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(NOT KEEL_FREESTANDING)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/ports/linux/ DESTINATION ${_keel_inc}/ports/linux
          FILES_MATCHING PATTERN "*.h")
  install(TARGETS keel_port_linux keel EXPORT KeelTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  if(TARGET keel_alloc_probe)
    install(FILES ${PROJECT_SOURCE_DIR}/tools/alloc_probe/alloc_probe.h DESTINATION ${_keel_inc}/alloc_probe)
    install(TARGETS keel_alloc_probe EXPORT KeelTargets
            OBJECTS DESTINATION ${CMAKE_INSTALL_LIBDIR}/keel/alloc_probe)
  endif()
endif()

install(EXPORT KeelTargets NAMESPACE keel:: DESTINATION ${KEEL_INSTALL_CMAKEDIR} FILE KeelTargets.cmake)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/KeelConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/KeelConfig.cmake INSTALL_DESTINATION ${KEEL_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/KeelConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/KeelConfig.cmake ${PROJECT_BINARY_DIR}/KeelConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/KeelDependencies.cmake ${PROJECT_SOURCE_DIR}/cmake/KeelMemoryCheck.cmake
        DESTINATION ${KEEL_INSTALL_CMAKEDIR})

# pkg-config: a plain compiler command line. The prefix is found from the file's own place, so
# the tree works wherever it was installed (--prefix at install time, not at configure time).
file(RELATIVE_PATH _keel_pc_up /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" _keel_pc_up "${_keel_pc_up}")
set(KEEL_PC_CFLAGS "")
set(KEEL_PC_LIBS "")
# Flags for a directory unless the compiler searches it anyway.
function(_keel_pc_dir var flag dir implicit)
  if(dir AND NOT dir IN_LIST ${implicit})
    set(${var} "${${var}} ${flag}${dir}" PARENT_SCOPE)
  endif()
endfunction()
_keel_pc_dir(KEEL_PC_CFLAGS -I "${FLATBUFFERS_INCLUDE_DIR}" CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
foreach(prefix XNNPACK PTHREADPOOL)
  if((prefix STREQUAL "XNNPACK" AND KEEL_USE_XNNPACK) OR (prefix STREQUAL "PTHREADPOOL" AND KEEL_WITH_PTHREADPOOL))
    _keel_pc_dir(KEEL_PC_CFLAGS -I "${${prefix}_INCLUDE_DIR}" CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    get_filename_component(_dir "${${prefix}_LIBRARY}" DIRECTORY)
    get_filename_component(_name "${${prefix}_LIBRARY}" NAME_WE)
    string(REGEX REPLACE "^lib" "" _name "${_name}")
    _keel_pc_dir(KEEL_PC_LIBS -L "${_dir}" CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    string(APPEND KEEL_PC_LIBS " -l${_name}")
  endif()
endforeach()
if(KEEL_WITH_PTHREADPOOL)
  string(APPEND KEEL_PC_LIBS " -pthread")
endif()
# The engine is C++: a C program linked by the C compiler needs the C++ runtime the C++
# compiler adds (libstdc++ and libm with GCC).
foreach(lib IN LISTS CMAKE_CXX_IMPLICIT_LINK_LIBRARIES)
  if(NOT lib IN_LIST CMAKE_C_IMPLICIT_LINK_LIBRARIES)
    string(APPEND KEEL_PC_LIBS " -l${lib}")
  endif()
endforeach()
set(KEEL_PC_DEFINES "")
get_target_property(_defs keel_engine INTERFACE_COMPILE_DEFINITIONS)
foreach(def IN LISTS _defs)
  string(APPEND KEEL_PC_DEFINES " -D${def}")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/keel.pc.in ${PROJECT_BINARY_DIR}/keel.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/keel.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
