# harmonaize_man_page(TARGET exe NAME "one-line description" COMPONENT component [SECTION n])
#
# Generates man/<exe>.1 at build time with help2man from the executable's own
# --help and --version, so the page cannot drift from the program, and
# installs it to share/man/man<n> (n: 1 by default; 8 for a daemon) in the given install component. The
# executable must print its usage for --help and "<exe> <version>" for
# --version, both exiting 0.
find_program(HELP2MAN help2man REQUIRED)

function(harmonaize_man_page)
  cmake_parse_arguments(M "" "TARGET;NAME;COMPONENT;SECTION" "" ${ARGN})
  if(NOT M_SECTION)
    set(M_SECTION 1)
  endif()
  if(NOT M_TARGET OR NOT M_NAME OR NOT M_COMPONENT)
    message(FATAL_ERROR "harmonaize_man_page: TARGET, NAME and COMPONENT are required")
  endif()
  set(page ${PROJECT_BINARY_DIR}/man/${M_TARGET}.${M_SECTION})
  # The environment is cleared of what the programs read, so that the page
  # describes their defaults rather than the build machine's settings.
  add_custom_command(
    OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
    COMMAND ${CMAKE_COMMAND} -E env --unset=HZ_CONTROL_SOCKET --unset=HZ_DEVICE
            ${HELP2MAN} --no-info --no-discard-stderr --section=${M_SECTION} --name=${M_NAME}
            --output=${page}
            $<TARGET_FILE:${M_TARGET}>
    DEPENDS ${M_TARGET}
    COMMENT "Generating the man page ${M_TARGET}.${M_SECTION}"
    VERBATIM)
  add_custom_target(${M_TARGET}_man ALL DEPENDS ${page})
  install(FILES ${page} DESTINATION share/man/man${M_SECTION} COMPONENT ${M_COMPONENT})
endfunction()
