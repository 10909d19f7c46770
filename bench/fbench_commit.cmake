# Writes OUT, a header defining FB_COMMIT (the source tree's commit, "-dirty"
# with uncommitted changes to tracked files, "unknown" outside git), and
# rewrites it only when that changed. bench.cmake runs it at every build, so
# ferry-bench's plots name the code they measured.
#   cmake -DSRC=<source dir> -DOUT=<header> -P fbench_commit.cmake
set(commit unknown)
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE rc ERROR_QUIET)
if(rc EQUAL 0 AND NOT head STREQUAL "")
  set(commit ${head})
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND NOT changes STREQUAL "")
    set(commit "${head}-dirty")
  endif()
endif()
set(text "/* Written by bench/fbench_commit.cmake at build time. */\n#define FB_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
