# Installs the python component, with the tenant component it needs
# (libharmonaize), into PREFIX and imports it from there, with nothing of the
# build tree on the path. Run by ctest (python_install).
file(REMOVE_RECURSE ${PREFIX})
foreach(component tenant python)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
                          --component ${component}
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install --component ${component} failed: ${rc}")
  endif()
endforeach()
set(check "import sys; sys.path.insert(0, '${PREFIX}/${SITE}')
import harmonaize, harmonaize.distributed, torch.distributed as dist
assert harmonaize.__file__.startswith('${PREFIX}'), harmonaize.__file__
assert 'HARMONAIZE' in dist.Backend._plugins
print('installed package imports from', harmonaize.__file__)")
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH ${PYTHON} -c "${check}"
                WORKING_DIRECTORY ${PREFIX} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed package does not import")
endif()
