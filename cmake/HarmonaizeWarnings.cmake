# Warnings and sanitizers applied to every project target.
add_compile_options(-Wall -Wextra -Wshadow -Wcast-align
                    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
                    -Wformat=2 -Wimplicit-fallthrough -Wnull-dereference)
if(HZ_WERROR)
  add_compile_options(-Werror)
endif()

if(HZ_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(HZ_SANITIZED=1)
  # Sanitizer instrumentation makes GCC's flow analysis report false
  # "may be used uninitialized" inside libstdc++ (std::regex, std::function);
  # the default build keeps the warning.
  add_compile_options($<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
endif()

if(HZ_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "HZ_FUZZ needs clang: use the 'fuzz' preset")
  endif()
  # Everything is instrumented for coverage; only the fuzz targets link libFuzzer's main.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(HZ_SANITIZED=1 HZ_FUZZING=1)
endif()
