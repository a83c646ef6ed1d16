# Third-party libraries, all from Debian's packages (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(doctest REQUIRED)
find_package(CLI11 REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(RocksDB REQUIRED)
find_package(prometheus-cpp REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)

# OpenBLAS: Debian ships the pthread flavour behind the cblas alternative.
find_path(HYPIC_CBLAS_INCLUDE cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread
          /usr/include/openblas REQUIRED)
find_library(HYPIC_OPENBLAS_LIB NAMES openblas PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread
             REQUIRED)
add_library(hypic_openblas INTERFACE)
target_include_directories(hypic_openblas SYSTEM INTERFACE ${HYPIC_CBLAS_INCLUDE})
target_link_libraries(hypic_openblas INTERFACE ${HYPIC_OPENBLAS_LIB})
