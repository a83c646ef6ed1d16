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
# hiredis (Debian's libhiredis-dev): the remote tier on Redis (storage/redis_tier.h).
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)

# oneDNN (Debian's libdnnl-dev, built on OpenMP/libgomp): every CPU GEMM (gpu/cpu/gemm.h).
# Found by hand: Debian's dnnl-config.cmake requires the OpenCL headers (its GPU runtime),
# which the CPU engine we use does not need.
find_path(HYPIC_DNNL_INCLUDE dnnl.hpp REQUIRED)
find_library(HYPIC_DNNL_LIB NAMES dnnl REQUIRED)
add_library(hypic_dnnl INTERFACE)
target_include_directories(hypic_dnnl SYSTEM INTERFACE ${HYPIC_DNNL_INCLUDE})
target_link_libraries(hypic_dnnl INTERFACE ${HYPIC_DNNL_LIB})
find_package(OpenMP REQUIRED COMPONENTS CXX)
