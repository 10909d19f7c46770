# ferry_loopback_bench: two processes over loopback through the plugin API.
# Included by bench/CMakeLists.txt once bench/*.c exists.
add_executable(ferry_loopback_bench ${CMAKE_CURRENT_LIST_DIR}/ferry_loopback_bench.c)
target_include_directories(ferry_loopback_bench PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(ferry_loopback_bench PRIVATE ${CMAKE_DL_LIBS})
# The bench dlopens the plugin like NCCL; default to the one this tree builds.
target_compile_definitions(ferry_loopback_bench PRIVATE
  FERRY_BENCH_DEFAULT_PLUGIN="$<TARGET_FILE:nccl-net-ferry>")
add_dependencies(ferry_loopback_bench nccl-net-ferry)
