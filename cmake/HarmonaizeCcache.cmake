# Compiler caching. A full build of every preset takes most of a test run on a
# small machine, and CI builds a fresh clone each time: ccache (Debian's) lets
# that clone reuse objects compiled by earlier runs in any other folder.
#
# Two things make an object independent of the folder it was built in:
#   - scripts/test.sh sets CCACHE_BASEDIR to the source tree, so ccache hashes
#     paths below it as relative ones;
#   - -ffile-prefix-map drops the source and build folders from debug info and
#     __FILE__, so a cached object is right for every clone, and ccache need
#     not hash the working directory (CCACHE_NOHASHDIR).
# HZ_CCACHE=OFF, or a launcher already given on the command line, turns it off.
option(HZ_CCACHE "Compile through ccache when it is installed" ON)
if(HZ_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(HZ_CCACHE_PROGRAM ccache)
  if(HZ_CCACHE_PROGRAM)
    set(CMAKE_C_COMPILER_LAUNCHER ${HZ_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${HZ_CCACHE_PROGRAM})
  endif()
endif()
add_compile_options(-ffile-prefix-map=${PROJECT_SOURCE_DIR}/=
                    -ffile-prefix-map=${PROJECT_BINARY_DIR}/=build/)
