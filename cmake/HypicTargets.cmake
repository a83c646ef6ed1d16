# Helpers that give every target of ours the same flags.
#   hypic_library(NAME SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])  -> target hypic_NAME, alias hypic::NAME
#   hypic_executable(NAME SOURCES ... DEPS ... [UNITY])
#     UNITY: compiled as unity batches of kHypicUnityBatch sources. For the tools whose many
#     small files each include CLI11 (header-only here: ~7 s of every file's -O2 compile, ~15 s
#     under ASan), so the library is compiled once per batch instead of once per file
#     (docs/operations-server.md, "CI time budget"). Names in anonymous namespaces must then be
#     unique across the target's files.
#   hypic_test(NAME SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s])  -> doctest binary + ctest entries
function(hypic_apply_flags target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${HYPIC_WARNINGS}>
                                            $<$<COMPILE_LANGUAGE:CUDA>:${HYPIC_CUDA_WARNINGS}>)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  if(HYPIC_WITH_CUDA)
    target_compile_definitions(${target} PUBLIC HYPIC_WITH_CUDA=1)
  endif()
endfunction()

function(hypic_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(hypic_${name} STATIC ${ARG_SOURCES})
  add_library(hypic::${name} ALIAS hypic_${name})
  hypic_apply_flags(hypic_${name})
  target_link_libraries(hypic_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

set(kHypicUnityBatch 8)

function(hypic_executable name)
  cmake_parse_arguments(ARG "UNITY" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  hypic_apply_flags(${name})
  if(ARG_UNITY)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${kHypicUnityBatch})
  endif()
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# A test's own sources compile at -O1 in RelWithDebInfo builds (the code under test, in the
# libraries, keeps -O2): doctest's assertions make large functions that -O2 spends 25-45% more
# time on (tests/storage/tier_manager_test.cpp: 18.1 s -> 12.4 s; docs/operations-server.md,
# "CI time budget"), for tests that run no faster.
function(hypic_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  hypic_apply_flags(${name})
  target_compile_options(${name} PRIVATE $<$<AND:$<CONFIG:RelWithDebInfo>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
  target_link_libraries(${name} PRIVATE hypic_test_main ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
                       ENVIRONMENT "HYPIC_BIN_DIR=${PROJECT_BINARY_DIR}/bin;HYPIC_SOURCE_DIR=${PROJECT_SOURCE_DIR};${HYPIC_SANITIZER_ENV}")
endfunction()

# Adds every immediate subfolder of the current source dir that has a CMakeLists.txt, in the
# order given (folders not listed are added last, alphabetically).
function(hypic_add_subdirectories)
  set(done "")
  foreach(dir ${ARGN})
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/CMakeLists.txt)
      add_subdirectory(${dir})
    endif()
    list(APPEND done ${dir})
  endforeach()
  file(GLOB children RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT children)
  foreach(dir ${children})
    if(NOT dir IN_LIST done AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/CMakeLists.txt)
      add_subdirectory(${dir})
    endif()
  endforeach()
endfunction()

# hypic_fuzz_target(NAME SOURCES ... DEPS ...)
# The source defines LLVMFuzzerTestOneInput. Always builds NAME_replay, a ctest that runs every
# file of tests/fuzz/corpus/NAME through it; with HYPIC_FUZZ=ON also builds the libFuzzer
# binary NAME_fuzzer (run: NAME_fuzzer tests/fuzz/corpus/NAME -max_total_time=60).
function(hypic_fuzz_target name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  set(corpus ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
  add_executable(${name}_replay ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/support/fuzz_replay_main.cpp)
  hypic_apply_flags(${name}_replay)
  target_link_libraries(${name}_replay PRIVATE ${ARG_DEPS})
  set_target_properties(${name}_replay PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME ${name}_replay COMMAND ${name}_replay ${corpus})
  set_tests_properties(${name}_replay PROPERTIES LABELS "fuzz" TIMEOUT 300)
  if(HYPIC_FUZZ)
    add_executable(${name}_fuzzer ${ARG_SOURCES})
    hypic_apply_flags(${name}_fuzzer)
    target_compile_options(${name}_fuzzer PRIVATE -fsanitize=fuzzer)
    target_link_options(${name}_fuzzer PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${name}_fuzzer PRIVATE ${ARG_DEPS})
    set_target_properties(${name}_fuzzer PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
    add_test(NAME ${name}_fuzz_smoke COMMAND ${name}_fuzzer -max_total_time=20 -rss_limit_mb=2048
             ${corpus})
    set_tests_properties(${name}_fuzz_smoke PROPERTIES LABELS "fuzz" TIMEOUT 120)
  endif()
endfunction()
