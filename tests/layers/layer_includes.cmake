# cmake -DCC=<compiler> -DSRC=<source dir> -DBIN=<build dir> -DWORK=<scratch> -P layer_includes.cmake
# Fails (SEND_ERROR, exit 1) when a layer's include root shows a folder above
# or beside it, hides one below it, or a file under src/<layer> includes a
# folder its layer may not see.
cmake_minimum_required(VERSION 3.20)
include(${SRC}/cmake/FerryLayerTable.cmake)
set(layers ${FERRY_LAYERS} info)
file(MAKE_DIRECTORY ${WORK})

# The header each probe includes: a folder's main header.
set(probe_core core/log.h)
set(probe_proxy proxy/ring.h)
set(probe_socket socket/sock.h)
set(probe_ib ib/ib.h)
set(probe_nccl nccl/plugin.h)
set(probe_info info/info.h)
set(failures 0)
set(probes 0)

# 1. Each layer's root against each folder's main header and the two ABIs,
#    by __has_include: one preprocessor run per layer, an #error per mismatch.
foreach(layer ${layers})
  set(flags -I${BIN}/layers/${layer})
  if(layer IN_LIST FERRY_LAYERS_SEE_NCCL_ABI)
    list(APPEND flags -I${SRC}/include)
  endif()
  set(cases)
  foreach(dir ${layers})
    if(dir IN_LIST FERRY_LAYER_SEES_${layer})
      list(APPEND cases "${probe_${dir}}=1")
    else()
      list(APPEND cases "${probe_${dir}}=0")
    endif()
  endforeach()
  list(APPEND cases "ferry/verbs_abi.h=1")
  if(layer IN_LIST FERRY_LAYERS_SEE_NCCL_ABI)
    list(APPEND cases "nccl/net.h=1")
  else()
    list(APPEND cases "nccl/net.h=0")
  endif()
  set(text "")
  foreach(case ${cases})
    string(REPLACE "=" ";" case ${case})
    list(GET case 0 hdr)
    list(GET case 1 want)
    math(EXPR probes "${probes} + 1")
    if(want)
      string(APPEND text "#if !__has_include(\"${hdr}\")\n#error layer ${layer}: "
             "${hdr} is hidden, but the ${layer} layer may include it\n#endif\n")
    else()
      string(APPEND text "#if __has_include(\"${hdr}\")\n#error layer ${layer}: "
             "${hdr} is visible, but its folder is above the ${layer} layer or beside it\n#endif\n")
    endif()
  endforeach()
  file(WRITE ${WORK}/${layer}.c "${text}")
  execute_process(COMMAND ${CC} -E -o ${WORK}/${layer}.i ${flags} ${WORK}/${layer}.c
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(SEND_ERROR "the ${layer} layer's include root (${BIN}/layers/${layer}, "
                       "cmake/FerryLayerTable.cmake) is wrong:\n${err}")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

# 2. Every quoted include under src/<layer>, read from the source: it names a
#    folder the layer sees, include/ferry, or (nccl, info) a header of include/nccl.
set(scanned 0)
foreach(layer ${layers})
  file(GLOB files ${SRC}/src/${layer}/*.c ${SRC}/src/${layer}/*.h)
  foreach(f ${files})
    math(EXPR scanned "${scanned} + 1")
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[A-Za-z0-9_]+/")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*$" "\\1" hdr "${line}")
      string(REGEX REPLACE "/.*$" "" dir "${hdr}")
      if(dir IN_LIST FERRY_LAYER_SEES_${layer} OR dir STREQUAL "ferry")
        continue()
      endif()
      if(layer IN_LIST FERRY_LAYERS_SEE_NCCL_ABI AND EXISTS ${SRC}/include/${hdr})
        continue()
      endif()
      file(RELATIVE_PATH rel ${SRC} ${f})
      list(JOIN FERRY_LAYER_SEES_${layer} "/, " sees)
      message(SEND_ERROR "${rel}: #include \"${hdr}\": the ${layer} layer may include "
                         "${sees}/ and ferry/, not ${dir}/ "
                         "(cmake/FerryLayerTable.cmake)")
      math(EXPR failures "${failures} + 1")
    endforeach()
  endforeach()
endforeach()

message(STATUS "layering: ${probes} include probes, ${scanned} source files scanned, "
               "${failures} violation(s)")
