# Debian packages from this build: `cpack -G DEB` in the build directory
# (after a build configured with -DCMAKE_INSTALL_PREFIX=/usr, which
# scripts/package.sh does) writes
#   sovia_<version>_<arch>.deb         the command, libvipl and libsovia (with
#                                      their sonames), the preload, its
#                                      helper, the report's Python, man pages
#                                      (1, 5), bash completion
#   libsovia-dev_<version>_<arch>.deb  headers, the .so links, vipl.pc and
#                                      sovia.pc, man pages (3)
# Dependencies: what the binaries link (dpkg-shlibdeps), python3 for the
# report; libfabric (loaded only when a fabric NIC opens, fabric_dl.c) and
# matplotlib (the report's plots) are recommended, not required.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sovia)
set(CPACK_PACKAGE_VENDOR "the sovia project")
set(CPACK_PACKAGE_CONTACT "sovia maintainers <sovia@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# shlibs for libvipl.so.0 and libsovia.so.0, stripped binaries (lintian).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_STRIP_FILES ON)
# libvipl and libsovia are in the package itself (found through RUNPATH).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
  "${PROJECT_BINARY_DIR}/${CMAKE_INSTALL_LIBDIR}")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME sovia)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/deb/triggers)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "libfabric1, python3-matplotlib")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "ucx-utils, sockperf, iperf3")
# CPack puts the summary on the first line (the synopsis) itself.
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "sovia carries TCP connections between processes over a
VIA 1.0 provider library: shared memory on one host, libfabric between
hosts. 'sovia run' carries an unmodified program's connections to peers
that also run under sovia and leaves every other one on kernel TCP.
Includes the sovia command (run, env, stat, bench, report, doctor, ksock,
lane), libvipl, libsovia and the preload library.")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libsovia-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "sovia (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_DEV_DESCRIPTION "Development files: headers (vipl.h, vipl_ext.h, sovia.h),
pkg-config files (vipl, sovia) and manual pages (vipl(3), sovia(3)) for
programs that call the VI Provider Library or the sovia sockets layer
directly.")
# Debian policy: a copyright file and, for a native package, a
# changelog.gz in each package's doc directory.
string(TIMESTAMP SOVIA_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb/changelog.in ${PROJECT_BINARY_DIR}/deb/changelog @ONLY)
execute_process(COMMAND gzip -9nf ${PROJECT_BINARY_DIR}/deb/changelog)
foreach(pkg sovia libsovia-dev)
  set(component runtime)
  if(pkg STREQUAL "libsovia-dev")
    set(component dev)
  endif()
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/deb/copyright ${PROJECT_BINARY_DIR}/deb/changelog.gz
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${pkg} COMPONENT ${component})
endforeach()
include(CPack)
