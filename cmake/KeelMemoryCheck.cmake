# keel_add_memory_check: bounded memory as a CTest test (docs/memcheck.md).
#
# Checks a model with `keel memcheck`: the test passes when no allocator is called after init,
# RSS stays flat after the warm-up and, with MAX_RSS, the peak RSS stays under the limit.
#
#   keel_add_memory_check(<name> MODEL <model.keel>
#                         [TOKENS n] [PROMPT_TOKENS p] [KV_POLICY policy] [KV_BUDGET tokens]
#                         [MAX_RSS bytes] [RSS_TOLERANCE bytes] [TEXT path] [THREADS n]
#                         [KEEL <keel executable>] [TIMEOUT seconds] [FIXTURES fixture...]
#                         [ARGS more keel memcheck options...])
#
# Checks your own program: links the allocation probe (tools/alloc_probe/alloc_probe.h:
# keel::probe::counts(), since(), rss_bytes(), ...) into the executable target <app> and runs
# it as the test; the program asserts what it needs and exits non-zero when a check fails.
#
#   keel_add_memory_check(<name> TARGET <app> [TIMEOUT seconds] [FIXTURES fixture...]
#                         [ARGS arguments of the app...])
#
# Keel's top-level CMakeLists.txt includes this file (add_subdirectory); an installed Keel's
# find_package(Keel) does too. The `keel` executable defaults to the target `keel` when Keel is
# part of the build (add_subdirectory), else to the installed one (keel::keel, from
# find_package), else to KEEL_EXECUTABLE or a `keel` found on PATH; the probe likewise is the
# target keel_alloc_probe or keel::alloc_probe. FIXTURES names CTest
# fixtures the test needs (for example the test that converts the model). The sanitizers replace
# the allocator themselves, so with KEEL_SANITIZE set this function refuses: guard the call.

function(keel_add_memory_check name)
  set(one_value MODEL TARGET TOKENS PROMPT_TOKENS KV_POLICY KV_BUDGET MAX_RSS RSS_TOLERANCE TEXT THREADS KEEL TIMEOUT)
  cmake_parse_arguments(PARSE_ARGV 1 KMC "" "${one_value}" "ARGS;FIXTURES")
  if(KMC_UNPARSED_ARGUMENTS)
    string(REPLACE ";" " " unexpected "${KMC_UNPARSED_ARGUMENTS}")
    string(REPLACE ";" " " known "${one_value}")
    message(FATAL_ERROR "keel_add_memory_check(${name}): unexpected arguments '${unexpected}'; the keywords are "
                        "${known} ARGS FIXTURES")
  endif()
  if((KMC_MODEL AND KMC_TARGET) OR (NOT KMC_MODEL AND NOT KMC_TARGET))
    message(FATAL_ERROR "keel_add_memory_check(${name}): expected exactly one of MODEL <file.keel> or TARGET <app>")
  endif()
  if(KEEL_SANITIZE)
    message(FATAL_ERROR "keel_add_memory_check(${name}): memory checks count the real allocator's calls, but this "
                        "build sets KEEL_SANITIZE=${KEEL_SANITIZE} and the sanitizers replace the allocator; add "
                        "memory checks only when KEEL_SANITIZE is empty")
  endif()

  if(KMC_MODEL)
    if(KMC_KEEL)
      set(keel ${KMC_KEEL})
    elseif(TARGET keel)
      set(keel $<TARGET_FILE:keel>)
    elseif(TARGET keel::keel)
      set(keel $<TARGET_FILE:keel::keel>)
    elseif(KEEL_EXECUTABLE)
      set(keel ${KEEL_EXECUTABLE})
    else()
      find_program(KEEL_EXECUTABLE keel)
      if(NOT KEEL_EXECUTABLE)
        message(FATAL_ERROR "keel_add_memory_check(${name}): no `keel` executable: build Keel in this project, "
                            "set KEEL_EXECUTABLE or pass KEEL <path>")
      endif()
      set(keel ${KEEL_EXECUTABLE})
    endif()
    set(cmd ${keel} memcheck -m ${KMC_MODEL} --json)
    # keyword -> keel memcheck option
    foreach(pair TOKENS:--tokens PROMPT_TOKENS:--prompt-tokens KV_POLICY:--kv-policy KV_BUDGET:--kv-budget
                 MAX_RSS:--max-rss RSS_TOLERANCE:--rss-tolerance TEXT:--text THREADS:--threads)
      string(REPLACE ":" ";" pair ${pair})
      list(GET pair 0 key)
      list(GET pair 1 flag)
      if(DEFINED KMC_${key})
        list(APPEND cmd ${flag} ${KMC_${key}})
      endif()
    endforeach()
    add_test(NAME ${name} COMMAND ${cmd} ${KMC_ARGS})
    # The exit status decides; the JSON verdict is a second guard should a wrapper swallow it.
    set_tests_properties(${name} PROPERTIES FAIL_REGULAR_EXPRESSION "\"ok\":false")
  else()
    foreach(opt MODEL TOKENS PROMPT_TOKENS KV_POLICY KV_BUDGET MAX_RSS RSS_TOLERANCE TEXT THREADS KEEL)
      if(DEFINED KMC_${opt})
        message(FATAL_ERROR "keel_add_memory_check(${name}): ${opt} goes with MODEL; a TARGET app takes its "
                            "settings through ARGS")
      endif()
    endforeach()
    if(NOT TARGET ${KMC_TARGET})
      message(FATAL_ERROR "keel_add_memory_check(${name}): TARGET ${KMC_TARGET} is not a target (define the "
                          "executable before calling)")
    endif()
    get_target_property(type ${KMC_TARGET} TYPE)
    if(NOT type STREQUAL "EXECUTABLE")
      message(FATAL_ERROR "keel_add_memory_check(${name}): TARGET ${KMC_TARGET} is a ${type}; expected an executable")
    endif()
    if(TARGET keel_alloc_probe)
      set(probe keel_alloc_probe)
    elseif(TARGET keel::alloc_probe)
      set(probe keel::alloc_probe)
    else()
      message(FATAL_ERROR "keel_add_memory_check(${name}): the allocation probe (keel_alloc_probe or "
                          "keel::alloc_probe) is not defined; include Keel (add_subdirectory or find_package(Keel)) "
                          "before calling. A Keel built with KEEL_SANITIZE has no probe")
    endif()
    # Linking the probe twice (two checks of one app) is harmless: CMake links it once.
    target_link_libraries(${KMC_TARGET} PRIVATE ${probe})
    add_test(NAME ${name} COMMAND ${KMC_TARGET} ${KMC_ARGS})
  endif()

  if(KMC_TIMEOUT)
    set_tests_properties(${name} PROPERTIES TIMEOUT ${KMC_TIMEOUT})
  endif()
  if(KMC_FIXTURES)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "${KMC_FIXTURES}")
  endif()
  set_property(TEST ${name} APPEND PROPERTY LABELS memcheck)
endfunction()
