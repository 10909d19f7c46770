# Install layout, the .deb and the .rpm (docs/install.md).
#
#   ${libdir}/libnccl-net-ferry.so   the plugin, where NCCL's dlopen finds it
#   ${libdir}/libnccl-net.so         -> the plugin, with FERRY_INSTALL_NCCL_NET_LINK=ON
#                                    (the name NCCL loads when NCCL_NET_PLUGIN is unset)
#   ${bindir}/ferry-info             the health check (docs/ferry-info.md)
#   ${mandir}/man1/ferry-info.1.gz   its manual page (packaging/ferry-info.1)
#   ${docdir}/                       README (packaging/README: the package's own,
#                                    naming only what is installed), LICENSE,
#                                    docs/*.md.gz, and for Debian copyright,
#                                    changelog.Debian.gz
#   ${datadir}/lintian/overrides/ferry-nccl-net   the lintian tags that do not
#                                    apply to a plugin, each with its reason
#
# `cpack -G DEB` / `cpack -G RPM` in the build tree (or `cmake --build build
# --target package`, DEB) make ferry-nccl-net_<version>-1_<arch>.deb and
# ferry-nccl-net-<version>-1.<arch>.rpm; tests/package_check.sh builds both
# and checks them (lintian clean, installed into a scratch root, ferry-info
# healthy there). Binaries are stripped in both.
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

set(FERRY_PACKAGE_MAINTAINER "ferry developers <ferry@example.org>" CACHE STRING
  "The packages' Maintainer (deb) and Packager (rpm), as \"Name <address>\"")
set(FERRY_PACKAGE_RELEASE 1 CACHE STRING
  "The packages' release: the -N after the version, counting packagings of one version")

# Documentation, compressed at build time (gzip -9n, reproducible): the
# source tree's docs, the package README, the manual page, and the Debian
# changelog made from packaging/debian/changelog.in.
set(FERRY_PKG_DIR ${CMAKE_CURRENT_BINARY_DIR}/packaging)
set(FERRY_DEB_VERSION ${PROJECT_VERSION}-${FERRY_PACKAGE_RELEASE})
# SOURCE_DATE_EPOCH, when set, makes the date (and so the package) reproducible.
string(TIMESTAMP FERRY_DEB_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
set(CPACK_DEBIAN_PACKAGE_NAME ferry-nccl-net)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${FERRY_PACKAGE_MAINTAINER}")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/packaging/debian/changelog.in
               ${FERRY_PKG_DIR}/changelog.Debian @ONLY)
file(GLOB FERRY_DOCS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/docs/*.md)
set(FERRY_GZ_OUT "")
foreach(src ${FERRY_DOCS} ${CMAKE_CURRENT_SOURCE_DIR}/packaging/ferry-info.1
            ${FERRY_PKG_DIR}/changelog.Debian)
  get_filename_component(name ${src} NAME)
  add_custom_command(OUTPUT ${FERRY_PKG_DIR}/${name}.gz
    COMMAND ${CMAKE_COMMAND} -DIN=${src} -DOUT=${FERRY_PKG_DIR}/${name}.gz
            -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/FerryGzip.cmake
    DEPENDS ${src} ${CMAKE_CURRENT_SOURCE_DIR}/cmake/FerryGzip.cmake VERBATIM)
  list(APPEND FERRY_GZ_OUT ${FERRY_PKG_DIR}/${name}.gz)
endforeach()
add_custom_target(ferry-package-docs ALL DEPENDS ${FERRY_GZ_OUT})
list(FILTER FERRY_GZ_OUT INCLUDE REGEX "\\.md\\.gz$")
install(FILES ${FERRY_GZ_OUT} ${CMAKE_CURRENT_SOURCE_DIR}/LICENSE
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/packaging/README DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${FERRY_PKG_DIR}/ferry-info.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
# Debian's own files: the machine-readable copyright, the changelog, the
# overrides (lintian reads them from this path in the installed package).
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/packaging/debian/copyright
              ${FERRY_PKG_DIR}/changelog.Debian.gz
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/packaging/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME ferry-nccl-net)

# The `package` target's generator (CPack's own default would be tarballs).
if(NOT CPACK_GENERATOR)
  set(CPACK_GENERATOR DEB)
endif()
set(CPACK_PACKAGE_NAME ferry-nccl-net)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "ferry")
set(CPACK_PACKAGE_CONTACT "${FERRY_PACKAGE_MAINTAINER}")
# Under 80 characters: Debian's synopsis limit.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "NCCL network plugin with TCP and InfiniBand/RoCE backends")
# Lines under 80 characters (Debian's limit); a line of "." is an empty line.
set(CPACK_PACKAGE_DESCRIPTION [=[ferry is a network plugin for NCCL (libnccl-net-ferry.so): multi-stream TCP
and libibverbs (loaded at run time) transports behind the ncclNet v8-v12 ABI.
It links only libc, so one package serves hosts with and without RDMA or GPUs.
.
The package also holds ferry-info, which checks that the plugin loads and
works on this host.]=])
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_CURRENT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${FERRY_PACKAGE_RELEASE})
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
# Only libc is linked; everything else is dlopened when a backend needs it.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libibverbs1, ibverbs-providers")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "librdmacm1, libcuda1, rdma-core")
# A shared library in the linker's directory: refresh its cache on install.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_SOURCE_DIR}/packaging/debian/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
set(CPACK_RPM_PACKAGE_RELEASE ${FERRY_PACKAGE_RELEASE})
set(CPACK_RPM_PACKAGE_LICENSE "Apache-2.0")
set(CPACK_RPM_PACKAGE_GROUP "System Environment/Libraries")
set(CPACK_RPM_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_RPM_PACKAGE_SUGGESTS "rdma-core, libibverbs, librdmacm")
# No /usr/lib/.build-id links: the .rpm holds the same files as the .deb.
set(CPACK_RPM_SPEC_MORE_DEFINE "%define _build_id_links none")
# The package owns its own files and directories, never the system's.
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION
  /usr/share/man /usr/share/man/man1 /usr/share/lintian /usr/share/lintian/overrides)
include(CPack)
