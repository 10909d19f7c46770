# cmake -DNM=<nm> -DSRC=<source dir> -DLIB_<layer>=<static library>...
#       -DOBJS_nccl=<the plugin's objects, |-separated> -P layer_symbols.cmake
# Fails (SEND_ERROR, exit 1) when a layer's library leaves undefined a symbol
# that its own layer and those below it do not define but a layer above it or
# beside it does: a call against the layering that the include roots cannot
# see (a declaration written by hand, a function pointer filled by name).
cmake_minimum_required(VERSION 3.20)
include(${SRC}/cmake/FerryLayerTable.cmake)
set(libs core proxy socket ib)

# The top layer is the shared plugin, which hides its symbols: its objects,
# "|"-separated, stand for it.
string(REPLACE "|" ";" LIB_nccl "${OBJS_nccl}")

# where_<symbol>: the layer whose library defines the global symbol.
foreach(layer ${libs} nccl)
  execute_process(COMMAND ${NM} -g --defined-only ${LIB_${layer}}
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${LIB_${layer}}: ${err}")
  endif()
  string(REGEX MATCHALL "[0-9a-fA-F]+ [A-Za-z] [^\n]+" rows "${out}")
  foreach(row ${rows})
    string(REGEX REPLACE "^[0-9a-fA-F]+ [A-Za-z] " "" sym "${row}")
    set(where_${sym} ${layer})
  endforeach()
endforeach()

set(failures 0)
set(checked 0)
foreach(layer ${libs})
  # "member.o:                 U sym" with -A: the object that needs it.
  execute_process(COMMAND ${NM} -A -u ${LIB_${layer}} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  string(REGEX MATCHALL "[^\n]+" rows "${out}")
  foreach(row ${rows})
    if(NOT row MATCHES "^(.*):([^:]+):[ \t]+U[ \t]+([^ \t]+)$")
      continue()
    endif()
    set(obj ${CMAKE_MATCH_2})
    set(sym ${CMAKE_MATCH_3})
    if(NOT DEFINED where_${sym})
      continue() # The C library's, the verbs library's (dlsym'd): outside the layers.
    endif()
    math(EXPR checked "${checked} + 1")
    set(other ${where_${sym}})
    if(NOT other IN_LIST FERRY_LAYER_SEES_${layer})
      message(SEND_ERROR "layer ${layer}: ${obj} uses ${sym}, which only the ${other} layer "
                         "defines (above ${layer} or beside it); hand it down instead (an ops "
                         "table, a pointer given at init), as the backend list is")
      math(EXPR failures "${failures} + 1")
    endif()
  endforeach()
endforeach()
list(JOIN libs ", " names)
message(STATUS "layering: ${checked} references between ferry symbols checked in ${names}, "
               "${failures} against the layering")
