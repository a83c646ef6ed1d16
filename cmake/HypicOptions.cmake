# Build options. Every option is documented in README.md (Build options).
set(HYPIC_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE HYPIC_CUDA PROPERTY STRINGS AUTO ON OFF)
set(HYPIC_CUDA_ARCHS "90" CACHE STRING "CUDA architectures to compile for (e.g. 90 or 80;90)")
set(HYPIC_SANITIZE "" CACHE STRING "Sanitizers: '' | 'address;undefined' | 'thread'")
set(HYPIC_SANITIZE_EXCLUDE "" CACHE STRING "Checks left out of HYPIC_SANITIZE (e.g. 'null;alignment')")
option(HYPIC_FUZZ "Build libFuzzer targets (requires clang)" OFF)
option(HYPIC_WERROR "Treat warnings in our own code as errors" OFF)
option(HYPIC_NATIVE "Compile for the build machine's CPU (-march=native)" ON)
set(HYPIC_LONG_TESTS OFF CACHE BOOL "Register long-running tests (crash cycles, long fuzz runs)")
set(HYPIC_DEBUG_INFO "lines" CACHE STRING
    "Debug information of RelWithDebInfo builds: lines (-g1) | full (-g)")
set_property(CACHE HYPIC_DEBUG_INFO PROPERTY STRINGS lines full)

find_program(HYPIC_CCACHE ccache)
if(HYPIC_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${HYPIC_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${HYPIC_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${HYPIC_CCACHE})
endif()

if(HYPIC_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "HYPIC_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
endif()

# Flags for our own targets only (third-party headers are included as SYSTEM).
set(HYPIC_WARNINGS -Wall -Wextra -Wpedantic -Wno-unused-parameter -Wshadow=local -Wnon-virtual-dtor)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(HYPIC_WARNINGS -Wall -Wextra -Wpedantic -Wno-unused-parameter -Wshadow-uncaptured-local
      -Wnon-virtual-dtor -Wthread-safety)
endif()
# nvcc: its own warnings, and the host compiler's on the host side of our .cu files.
set(HYPIC_CUDA_WARNINGS -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-Wshadow=local)
if(HYPIC_WERROR)
  list(APPEND HYPIC_WARNINGS -Werror)
  list(APPEND HYPIC_CUDA_WARNINGS -Werror=all-warnings -Xcompiler=-Werror)
endif()

# RelWithDebInfo keeps line tables only by default (-g1): symbolized stack traces, sanitizer
# reports and perf's source lines all work, and a build takes ~25% less time than with -g
# (server/config.cpp: 28.8 s -> 20.8 s). HYPIC_DEBUG_INFO=full brings back -g for gdb.
# An AddressSanitizer build compiles at -O1 (ASan's advice), ~45% faster than -O2 -g
# (server/server.cpp: 91 s -> 49 s); CI's budget is mostly compile time (docs/operations-server.md,
# "CI time budget").
# Replaces the flag `from` by `to` in the C and C++ RelWithDebInfo flags.
macro(hypic_replace_relwithdebinfo_flag from to)
  foreach(_lang C CXX)
    string(REGEX REPLACE "(^| )${from}( |$)" "\\1${to}\\2" CMAKE_${_lang}_FLAGS_RELWITHDEBINFO
                         "${CMAKE_${_lang}_FLAGS_RELWITHDEBINFO}")
  endforeach()
endmacro()
if(HYPIC_DEBUG_INFO STREQUAL "lines")
  hypic_replace_relwithdebinfo_flag(-g -g1)
elseif(NOT HYPIC_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "HYPIC_DEBUG_INFO must be lines or full, not '${HYPIC_DEBUG_INFO}'")
endif()
if(HYPIC_SANITIZE MATCHES "address")
  hypic_replace_relwithdebinfo_flag(-O2 -O1)
endif()

set(HYPIC_SANITIZE_FLAGS "")
if(HYPIC_SANITIZE)
  string(REPLACE ";" "," _san "${HYPIC_SANITIZE}")
  set(HYPIC_SANITIZE_FLAGS -fsanitize=${_san} -fno-omit-frame-pointer)
  if(_san MATCHES "undefined")
    list(APPEND HYPIC_SANITIZE_FLAGS -fno-sanitize-recover=undefined)
  endif()
  if(HYPIC_SANITIZE_EXCLUDE)
    string(REPLACE ";" "," _skip "${HYPIC_SANITIZE_EXCLUDE}")
    list(APPEND HYPIC_SANITIZE_FLAGS -fno-sanitize=${_skip})
  endif()
  add_compile_options(${HYPIC_SANITIZE_FLAGS})
  add_link_options(${HYPIC_SANITIZE_FLAGS})
endif()
# The run-time environment of a sanitized build's tests (hypic_test adds it to each; the e2e
# tests' daemons inherit it). ThreadSanitizer: stop at the first report and write it to
# build/tsan/report.<pid> (.ci/run fails when any exists, so a race inside a daemon that a test
# only stops counts too); suppressions for third-party frames only (tests/tsan.supp); and
# OMP_THREAD_LIMIT=1, because Debian's libgomp is not instrumented: TSan cannot see its
# barriers, so every OpenMP region (ParallelFor, oneDNN) would report the hand-over of its
# inputs. Our own threads (io, compute workers, the store's write-back) are all checked.
set(HYPIC_SANITIZER_ENV "")
if(HYPIC_SANITIZE MATCHES "thread")
  set(HYPIC_SANITIZER_ENV
      "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1 log_path=${PROJECT_BINARY_DIR}/tsan/report suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp"
      "OMP_THREAD_LIMIT=1")
  file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/tsan)
endif()

if(HYPIC_NATIVE AND NOT HYPIC_FUZZ)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native HYPIC_HAS_MARCH_NATIVE)
  if(HYPIC_HAS_MARCH_NATIVE)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  # GCC tunes -march=native on Intel's AVX-512 cores for 256-bit vectors (the older cores'
  # clock penalty), so the loops it vectorises itself (norms, the GDN solve and conv, the
  # gating) used half the vector width this machine has. 512 measured 2-5% off a warm compose
  # and 3-5% off the GDN operator on the Intel Xeon of 2026-12-06 (docs/benchmarks.md), the
  # full prefill unchanged within its noise. A tuning flag only: no effect on CPUs without
  # AVX-512, and the same operations in the same order (no reassociation), so the same bits.
  check_cxx_compiler_flag(-mprefer-vector-width=512 HYPIC_HAS_PREFER_512)
  if(HYPIC_HAS_PREFER_512)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-mprefer-vector-width=512>)
  endif()
endif()
# The CPU kernels' 8-lane GCC vectors (gpu/cpu/vec8.h) are returned by value from inline
# helpers; below AVX GCC reports, once per file and with no location a pragma could silence,
# that such returns change the ABI. No call crosses an ABI boundary, so a build for baseline
# x86-64 (HYPIC_NATIVE=OFF) turns the note off rather than fail under HYPIC_WERROR.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-psabi>)
endif()
