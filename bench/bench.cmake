# ferry-bench: ferry against plain TCP between two processes (bench/README.md).
# It reuses the integration harness (plugin loading, connect/accept loops,
# logger) and links ferry_core for ferry_sock_config_load(), so the raw mode uses
# exactly the streams and threads ferry derives. Built even without tests.
set(FERRY_BENCH_DIR ${CMAKE_CURRENT_LIST_DIR})
set(FERRY_HARNESS_DIR ${PROJECT_SOURCE_DIR}/tests/integration)
add_executable(ferry-bench
  ${FERRY_BENCH_DIR}/fbench_main.c ${FERRY_BENCH_DIR}/fbench_side.c
  ${FERRY_BENCH_DIR}/fbench_plugin.c ${FERRY_BENCH_DIR}/fbench_raw.c
  ${FERRY_BENCH_DIR}/fbench_report.c ${FERRY_BENCH_DIR}/fbench_replot.c
  ${FERRY_BENCH_DIR}/fbench_opts.c ${FERRY_BENCH_DIR}/fbench_plot.c
  ${FERRY_HARNESS_DIR}/harness.c)
target_include_directories(ferry-bench PRIVATE ${FERRY_BENCH_DIR} ${FERRY_HARNESS_DIR}
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ferry-bench PRIVATE ferry_core ${CMAKE_DL_LIBS} pthread)
# The bench dlopens the plugin like NCCL; default to the one this tree builds.
target_compile_definitions(ferry-bench PRIVATE
  FERRY_BENCH_DEFAULT_PLUGIN="$<TARGET_FILE:nccl-net-ferry>"
  FERRY_PLUGIN_DEFAULT="$<TARGET_FILE:nccl-net-ferry>")
add_dependencies(ferry-bench nccl-net-ferry)
# The commit the plot's title names: looked up at every build, the header
# rewritten (and fbench_plot.c rebuilt) only when it changed.
add_custom_target(fbench-commit
  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR}
          -DOUT=${CMAKE_CURRENT_BINARY_DIR}/fbench_commit.h -P ${FERRY_BENCH_DIR}/fbench_commit.cmake
  BYPRODUCTS ${CMAKE_CURRENT_BINARY_DIR}/fbench_commit.h VERBATIM)
add_dependencies(ferry-bench fbench-commit)
target_include_directories(ferry-bench PRIVATE ${CMAKE_CURRENT_BINARY_DIR})

# libferry-flush-prof.so: an NCCL profiler plugin that times the GDR flush as
# NCCL's proxy sees it, for ferry and NCCL's own IB alike (compare.sh
# --flush-time, bench/nccl/README.md). Its own ABI declarations: no NCCL headers.
add_library(ferry-flush-prof MODULE ${FERRY_BENCH_DIR}/nccl/flush_profiler.c
  ${FERRY_BENCH_DIR}/nccl/flush_prof_stats.c ${FERRY_BENCH_DIR}/nccl/pc_sampler.c)
target_link_libraries(ferry-flush-prof PRIVATE pthread ${CMAKE_DL_LIBS} rt)

# libnccl-net-ferry-null.so: the plugin with FERRY_SOCK_NULL_PAYLOAD (src/socket/sock.h):
# socket chunks carry their header and no payload. For measuring the zero-cost
# ceiling only (bench/README.md); built on request (--target nccl-net-ferry-null),
# never installed.
add_library(ferry_layer_socket_null STATIC EXCLUDE_FROM_ALL ${FERRY_LAYER_SOURCES_socket})
target_compile_definitions(ferry_layer_socket_null PRIVATE FERRY_SOCK_NULL_PAYLOAD=1)
target_include_directories(ferry_layer_socket_null PRIVATE ${FERRY_LAYER_INCLUDE_socket})
target_link_libraries(ferry_layer_socket_null PUBLIC ferry_layer_proxy)
add_library(nccl-net-ferry-null SHARED EXCLUDE_FROM_ALL ${FERRY_NCCL_SOURCES})
target_include_directories(nccl-net-ferry-null PRIVATE ${FERRY_LAYER_INCLUDE_nccl})
target_link_libraries(nccl-net-ferry-null PRIVATE ferry_layer_socket_null ferry_layer_ib)
target_link_options(nccl-net-ferry-null PRIVATE
  -Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/ferry.map -Wl,--no-undefined -Wl,--as-needed)
set_target_properties(nccl-net-ferry-null PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})

# ferry-call-cost: ns per test() of a pending receive and per isend() that finds
# no receive, the calls NCCL's proxy loop repeats (bench/README.md).
add_executable(ferry-call-cost ${FERRY_BENCH_DIR}/call_cost.c ${FERRY_HARNESS_DIR}/harness.c)
target_include_directories(ferry-call-cost PRIVATE ${FERRY_HARNESS_DIR}
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ferry-call-cost PRIVATE ${CMAKE_DL_LIBS} pthread)
target_compile_definitions(ferry-call-cost PRIVATE
  FERRY_PLUGIN_DEFAULT="$<TARGET_FILE:nccl-net-ferry>")
add_dependencies(ferry-call-cost nccl-net-ferry)

# ferry-scale: N comm pairs between two processes, per backend: connect+accept
# time, threads, RSS, fds and (fakeibv) QPs/CQs/MRs per pair (bench/scale/README.md).
add_executable(ferry-scale ${FERRY_BENCH_DIR}/scale/ferry-scale.c ${FERRY_HARNESS_DIR}/harness.c
  ${FERRY_HARNESS_DIR}/harness_leaks.c)
target_include_directories(ferry-scale PRIVATE ${FERRY_HARNESS_DIR}
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(ferry-scale PRIVATE ${CMAKE_DL_LIBS} pthread)
target_compile_definitions(ferry-scale PRIVATE
  FERRY_PLUGIN_DEFAULT="$<TARGET_FILE:nccl-net-ferry>")
add_dependencies(ferry-scale nccl-net-ferry)
