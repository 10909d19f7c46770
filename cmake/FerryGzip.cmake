# cmake -DIN=<file> -DOUT=<file.gz> -P FerryGzip.cmake: OUT is IN compressed
# with gzip -9n (no name, no time stamp: the same bytes from every build, as
# Debian asks of compressed documentation).
execute_process(COMMAND gzip -9n -c "${IN}" OUTPUT_FILE "${OUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUT}")
  message(FATAL_ERROR "gzip -9n ${IN} failed (${rc})")
endif()
