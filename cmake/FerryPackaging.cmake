# Install layout and the .deb (docs/install.md).
#
#   ${libdir}/libnccl-net-ferry.so   the plugin, where NCCL's dlopen finds it
#   ${libdir}/libnccl-net.so         -> the plugin, with FERRY_INSTALL_NCCL_NET_LINK=ON
#                                    (the name NCCL loads when NCCL_NET_PLUGIN is unset)
#   ${bindir}/ferry-info             the health check (docs/ferry-info.md)
#   ${docdir}/                       README, LICENSE, docs/*.md
#
# `cpack -G DEB` in the build tree (or `cmake --build build --target package`)
# makes ferry-nccl-net_<version>_<arch>.deb.
# libibverbs, librdmacm and libcuda are only ever dlopened, so the package
# needs none of them: the ib backend's verbs libraries are Recommends,
# librdmacm (the ib backend's rdma_cm connection mode) and the CUDA driver
# Suggests.

option(FERRY_INSTALL_NCCL_NET_LINK
  "Also install libnccl-net.so -> libnccl-net-ferry.so (NCCL's default plugin name)" OFF)

# The link is made in the build tree and installed as a link (file(INSTALL)
# copies links as links), so it is right under any prefix and DESTDIR.
if(FERRY_INSTALL_NCCL_NET_LINK)
  set(FERRY_LINK_DIR ${CMAKE_CURRENT_BINARY_DIR}/nccl-net-link)
  add_custom_command(OUTPUT ${FERRY_LINK_DIR}/libnccl-net.so
    COMMAND ${CMAKE_COMMAND} -E make_directory ${FERRY_LINK_DIR}
    COMMAND ${CMAKE_COMMAND} -E create_symlink $<TARGET_FILE_NAME:nccl-net-ferry>
            ${FERRY_LINK_DIR}/libnccl-net.so
    VERBATIM)
  add_custom_target(nccl-net-link ALL DEPENDS ${FERRY_LINK_DIR}/libnccl-net.so)
  install(FILES ${FERRY_LINK_DIR}/libnccl-net.so DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

file(GLOB FERRY_DOCS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/docs/*.md)
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/README.md ${CMAKE_CURRENT_SOURCE_DIR}/LICENSE
              ${FERRY_DOCS}
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The `package` target's generator (CPack's own default would be tarballs).
if(NOT CPACK_GENERATOR)
  set(CPACK_GENERATOR DEB)
endif()
set(CPACK_PACKAGE_NAME ferry-nccl-net)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "ferry")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "NCCL network plugin (libnccl-net-ferry.so) with socket and InfiniBand/RoCE backends")
set(CPACK_PACKAGE_DESCRIPTION
  "ferry is a network plugin for NCCL: multi-stream TCP and libibverbs (loaded at run time) transports behind the ncclNet v8-v12 ABI, and ferry-info, which checks that the plugin loads and works on this host.")
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_CURRENT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_NAME ferry-nccl-net)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "ferry developers <ferry@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
# Only libc is linked; everything else is dlopened when a backend needs it.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libibverbs1, ibverbs-providers")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "librdmacm1, libcuda1, rdma-core")
include(CPack)
