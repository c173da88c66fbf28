# Third-party libraries, all from Debian's packages (scripts/install-deps.sh).
# A missing package is a configuration error, never a silently skipped feature.

# Both sides: the tenant library and hz need only these.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)  # control API, state files, hz --json
find_package(CLI11 REQUIRED)               # command lines

if(NOT HZ_BUILD_HOST)
  return()
endif()

# The provider's side.
find_package(PkgConfig REQUIRED)
find_package(Boost 1.74 REQUIRED)          # Asio (service I/O), Beast (metrics)
find_package(spdlog REQUIRED)              # structured logging
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)     # checkpoint storage I/O
pkg_check_modules(LIBVIRT REQUIRED IMPORTED_TARGET libvirt)    # domain definitions, hostdev attach
pkg_check_modules(LIBXML2 REQUIRED IMPORTED_TARGET libxml-2.0) # domain XML (libvirt's own parser)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus) # config and inventory files
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)     # the cluster store (Redis)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)  # sd_notify readiness
find_package(Gloo CONFIG REQUIRED)                              # the inter-host leg
find_package(prometheus-cpp CONFIG REQUIRED)                    # metric families, text format
find_program(HZ_PROMTOOL promtool)                              # checks a live scrape in tests

# ISA-L (CRC32C of checkpoint chunks) ships no CMake or pkg-config file in Debian 12.
find_path(ISAL_INCLUDE_DIR isa-l/crc.h REQUIRED)
find_library(ISAL_LIBRARY isal REQUIRED)
add_library(hz_isal INTERFACE)
target_include_directories(hz_isal INTERFACE ${ISAL_INCLUDE_DIR})
target_link_libraries(hz_isal INTERFACE ${ISAL_LIBRARY})
add_library(ISAL::isal ALIAS hz_isal)

# Boost.Asio: one io_context per thread, no deprecated interfaces.
add_library(hz_asio INTERFACE)
target_link_libraries(hz_asio INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(hz_asio INTERFACE BOOST_ASIO_NO_DEPRECATED BOOST_ERROR_CODE_HEADER_ONLY)
add_library(Hz::asio ALIAS hz_asio)
