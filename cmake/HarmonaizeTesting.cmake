# Test helpers shared by every component's tests.
#
# Labels (ctest -L): unit, integration, vm, fuzz-smoke. README.md's test
# command runs every label in the default build and unit+integration again
# under the sanitizers.

# hz_gtest(NAME name SOURCES ... LIBS ... LABEL unit|integration [TIMEOUT s] [RUN_SERIAL])
# RUN_SERIAL: the binary's tests run while no other test does (they measure
# shares of the CPU that other tests would take).
# The sources compile in batches (hz_unity_build, HarmonaizeUnity.cmake), so
# the names each file defines at file scope must differ from its neighbours':
# a helper that several files use lives once, in a header of their folder.
function(hz_gtest)
  cmake_parse_arguments(T "RUN_SERIAL" "NAME;LABEL;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT T_LABEL)
    message(FATAL_ERROR "hz_gtest(${T_NAME}): LABEL is required")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  hz_unity_build(${T_NAME})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock
                                          Threads::Threads)
  # Header-only helpers shared by tests of every component (tests/support/hz_test).
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  # Each TEST() is its own ctest entry, so a failure names the case.
  set(serial "")
  if(T_RUN_SERIAL)
    set(serial RUN_SERIAL TRUE)
  endif()
  gtest_discover_tests(${T_NAME} PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT} ${serial}
                       DISCOVERY_TIMEOUT 60)
endfunction()

# hz_fuzz_target(NAME name SOURCES ... LIBS ... CORPUS dir)
# Builds a libFuzzer target in the fuzz preset and registers a bounded smoke
# run over its seed corpus (label fuzz-smoke).
function(hz_fuzz_target)
  cmake_parse_arguments(F "" "NAME;CORPUS;RUNS" "SOURCES;LIBS" ${ARGN})
  if(NOT HZ_FUZZ)
    return()
  endif()
  if(NOT F_RUNS)
    set(F_RUNS 20000)
  endif()
  add_executable(${F_NAME} ${F_SOURCES})
  target_link_libraries(${F_NAME} PRIVATE ${F_LIBS})
  target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  # The fuzz preset builds only what the smoke runs need (see scripts/test.sh).
  if(NOT TARGET hz_fuzz_all)
    add_custom_target(hz_fuzz_all)
  endif()
  add_dependencies(hz_fuzz_all ${F_NAME})
  set(work ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME}-corpus)
  add_test(NAME ${F_NAME}-smoke
           COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
                   $<TARGET_FILE:${F_NAME}> -runs=${F_RUNS} -max_total_time=60
                   -rss_limit_mb=2048 -timeout=10 ${work} ${F_CORPUS})
  set_tests_properties(${F_NAME}-smoke PROPERTIES LABELS fuzz-smoke TIMEOUT 180
                       FIXTURES_REQUIRED ${F_NAME}-work)
  add_test(NAME ${F_NAME}-workdir COMMAND ${CMAKE_COMMAND} -E make_directory ${work})
  set_tests_properties(${F_NAME}-workdir PROPERTIES LABELS fuzz-smoke
                       FIXTURES_SETUP ${F_NAME}-work)
endfunction()
