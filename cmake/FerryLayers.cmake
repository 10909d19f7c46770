# ferry's layers, bottom up: core -> proxy -> {socket, ib} -> nccl. Each
# layer may include its own folder and the folders below it, never one above
# it or a sibling (socket and ib do not see each other). The build enforces
# it: each layer's sources compile with an include root of its own, a folder
# in the build tree holding links to the allowed src/<layer> folders only, so
# an include against the order fails to compile ("No such file"). The
# spelling stays "core/log.h", "proxy/ring.h" everywhere.
#
# include/ferry (ferry's own declarations of the verbs and rdma_cm ABI) is
# seen by every layer; include/nccl (NCCL's ABI) only by src/nccl, which
# translates it, and by ferry-info, a client of the exported ABI. A backend
# reads NCCL's values through the core's own constants (core/api.h).
#
# tests/layers checks both the include roots and, with nm, that no layer's
# library names a symbol defined only above it or beside it.

include(${CMAKE_CURRENT_LIST_DIR}/FerryLayerTable.cmake)

# The include root of a layer: ${PROJECT_BINARY_DIR}/layers/<layer>, links
# to src/<dir> for each allowed dir and to include/ferry; rebuilt at every
# configure, so a link no longer allowed goes.
function(ferry_layer_root layer out_var)
  set(root ${PROJECT_BINARY_DIR}/layers/${layer})
  file(MAKE_DIRECTORY ${root})
  file(GLOB old LIST_DIRECTORIES true ${root}/*)
  foreach(entry ${old})
    # Links only: file(REMOVE) unlinks them and never follows one into src/.
    if(IS_SYMLINK ${entry})
      file(REMOVE ${entry})
    endif()
  endforeach()
  foreach(dir ${FERRY_LAYER_SEES_${layer}})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${dir} ${root}/${dir} SYMBOLIC)
  endforeach()
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/ferry ${root}/ferry SYMBOLIC)
  set(dirs ${root})
  if(layer IN_LIST FERRY_LAYERS_SEE_NCCL_ABI)
    list(APPEND dirs ${PROJECT_SOURCE_DIR}/include)
  endif()
  set(${out_var} ${dirs} PARENT_SCOPE)
endfunction()

foreach(layer ${FERRY_LAYERS} info)
  ferry_layer_root(${layer} FERRY_LAYER_INCLUDE_${layer})
endforeach()

# One folder's sources each; the globs pick up files moved between folders.
foreach(layer core proxy socket ib)
  file(GLOB FERRY_LAYER_SOURCES_${layer} CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/src/${layer}/*.c)
endforeach()
file(GLOB FERRY_NCCL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/nccl/*.c)

# A layer's static library, compiled against that layer's include root only.
function(ferry_layer_library target layer)
  add_library(${target} STATIC ${ARGN})
  target_include_directories(${target} PRIVATE ${FERRY_LAYER_INCLUDE_${layer}})
endfunction()
