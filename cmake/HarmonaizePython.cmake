# The Python side of the tenant library: the `harmonaize` package (pybind11)
# and its torch.distributed backend (libtorch). Both come from Debian's
# packages (scripts/install-deps.sh), and both belong to Debian's interpreter.
#
# Which interpreter: the package must be built for the interpreter that has
# Debian's python3-torch. On many machines the first `python3` on PATH is
# another one (pyenv, a virtual environment, a conda install) that lacks it,
# so the choice is made by asking each candidate whether it can find torch:
#   1. Python3_EXECUTABLE or Python_EXECUTABLE when given on the command line;
#   2. /usr/bin/python3 (Debian's);
#   3. the first python3 on PATH.
# The first that can import torch wins; a given interpreter that cannot is
# reported and skipped. The test is importlib's find_spec, which does not load
# torch, so configuring stays quick.
#
# Sanitizer and fuzz builds leave the Python parts out (HZ_PYTHON=OFF): an
# extension module built with -fsanitize=address only loads into an
# interpreter started with libasan preloaded, and libtorch then reports its
# own allocations; the C++ code they share with the unit tests is still built
# and tested there (tests/unit/python).

set(_hz_python_default ON)
if(HZ_SANITIZE OR HZ_FUZZ)
  set(_hz_python_default OFF)
endif()
option(HZ_PYTHON "Build the harmonaize Python package and its PyTorch backend"
       ${_hz_python_default})

# hz_python_has_module(EXE MODULE OUT): OUT is TRUE when EXE can find MODULE.
function(hz_python_has_module exe module out)
  execute_process(
    COMMAND ${exe} -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('${module}') is None)"
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET TIMEOUT 30)
  if(rc EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Sets HZ_PYTHON_EXECUTABLE to the interpreter that has torch, or fails.
function(hz_find_torch_python)
  set(candidates)
  foreach(var Python3_EXECUTABLE Python_EXECUTABLE)
    if(${var})
      list(APPEND candidates ${${var}})
    endif()
  endforeach()
  list(APPEND candidates /usr/bin/python3)
  find_program(_hz_path_python3 python3 NO_CACHE)
  if(_hz_path_python3)
    list(APPEND candidates ${_hz_path_python3})
  endif()
  list(REMOVE_DUPLICATES candidates)
  foreach(exe ${candidates})
    if(NOT EXISTS ${exe})
      continue()
    endif()
    hz_python_has_module(${exe} torch has_torch)
    if(has_torch)
      set(HZ_PYTHON_EXECUTABLE ${exe} PARENT_SCOPE)
      return()
    endif()
    message(STATUS "harmonaize Python: ${exe} cannot import torch; not using it")
  endforeach()
  message(FATAL_ERROR
          "No Python 3 interpreter here can import torch (tried: ${candidates}). "
          "Install Debian's python3-torch with scripts/install-deps.sh, or configure "
          "with -DHZ_PYTHON=OFF to build without the Python package.")
endfunction()

if(HZ_PYTHON)
  hz_find_torch_python()
  # Every later lookup (pybind11's FindPython, the tests) uses this one; the
  # cache keeps it for scripts (scripts/demo.sh reads it from CMakeCache.txt).
  set(HZ_PYTHON_EXECUTABLE ${HZ_PYTHON_EXECUTABLE} CACHE INTERNAL
      "The Python interpreter the package is built for")
  set(Python_EXECUTABLE ${HZ_PYTHON_EXECUTABLE})
  set(Python3_EXECUTABLE ${HZ_PYTHON_EXECUTABLE})
  set(PYBIND11_FINDPYTHON ON)
  find_package(pybind11 2.10 CONFIG REQUIRED)
  find_package(Torch REQUIRED)
  # The c10d Python bindings (Store, ProcessGroup) live in libtorch_python,
  # which TorchConfig.cmake does not list.
  find_library(HZ_TORCH_PYTHON_LIBRARY torch_python REQUIRED
               HINTS ${TORCH_INSTALL_PREFIX}/lib)
  foreach(module pytest numpy)
    hz_python_has_module(${HZ_PYTHON_EXECUTABLE} ${module} has_module)
    if(NOT has_module)
      message(FATAL_ERROR "${HZ_PYTHON_EXECUTABLE} cannot import ${module}: "
                          "run scripts/install-deps.sh")
    endif()
  endforeach()
  message(STATUS "harmonaize Python: ${HZ_PYTHON_EXECUTABLE} (Python ${Python_VERSION}, "
                 "pybind11 ${pybind11_VERSION}, torch ${Torch_VERSION})")
endif()
