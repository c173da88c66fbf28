# Helpers for the install components (see the list in the top CMakeLists.txt).
include(CMakePackageConfigHelpers)

# hz_install_package_files(TARGET): the tenant-dev files that let others
# build against TARGET's export set: <TARGET>.pc (relocatable: its prefix is
# found from where the file lies) and <TARGET>Config.cmake with its version.
function(hz_install_package_files target)
  set(pkgconfig_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  file(RELATIVE_PATH HZ_PC_TO_PREFIX /prefix/${pkgconfig_dir} /prefix)
  string(REGEX REPLACE "/$" "" HZ_PC_TO_PREFIX "${HZ_PC_TO_PREFIX}")
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/${target}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/${target}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${target}.pc DESTINATION ${pkgconfig_dir}
          COMPONENT tenant-dev)

  set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/${target})
  install(EXPORT ${target}Targets NAMESPACE ${target}:: DESTINATION ${cmake_dir}
          COMPONENT tenant-dev)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/${target}Config.cmake.in
                                ${CMAKE_CURRENT_BINARY_DIR}/${target}Config.cmake
                                INSTALL_DESTINATION ${cmake_dir})
  # 0.x: a minor version may break the API; from 1.0 the major version.
  write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/${target}ConfigVersion.cmake
                                   COMPATIBILITY SameMinorVersion)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${target}Config.cmake
                ${CMAKE_CURRENT_BINARY_DIR}/${target}ConfigVersion.cmake
          DESTINATION ${cmake_dir} COMPONENT tenant-dev)
endfunction()

# hz_install_program(TARGET COMPONENT): an executable into bin, finding the
# project's libraries in the prefix's library directory wherever the prefix is.
function(hz_install_program target component)
  file(RELATIVE_PATH to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/${to_lib}")
  install(TARGETS ${target} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${component})
endfunction()
