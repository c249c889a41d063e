# Installation and the Debian package (included last from the top CMakeLists.txt, after provider/ and tools/
# added their install(TARGETS)).
#
#   cmake --install build [--prefix P]        DESTDIR=/stage cmake --install build
#   cpack --config build/CPackConfig.cmake    (or: ninja -C build package) -> build/urxe_<ver>_<arch>.deb
#
# Layout, under prefix P (default /usr/local; the .deb uses /usr):
#   P/bin/urxe
#   P/lib/<multiarch>/libibverbs/liburxe-rdmav34.so   libibverbs' own provider directory when P is /usr
#   /etc/libibverbs.d/urxe.driver  ("driver urxe")    when P is /usr
#   P/etc/libibverbs.d/urxe.driver ("driver P/lib/<multiarch>/libibverbs/liburxe")  for any other P
#   P/share/doc/urxe/                                 README.md and the module READMEs
#   P/share/man/man1/urxe.1.gz, urxe-COMMAND.1.gz     from the help texts (tools/lib/man-pages.sh)
# libibverbs reads only /etc/libibverbs.d (no environment variable in rdma-core 44), so the .driver file of
# a non-/usr prefix is there to be copied or linked into /etc/libibverbs.d. `urxe env` does not need it: the
# installed urxe finds the provider relative to itself (bin/../lib/<multiarch>/libibverbs).
include(GNUInstallDirs)

# The .driver file depends on the prefix the tree is installed under, which `cmake --install --prefix` and
# CPack choose at install time, so it is written then. file(INSTALL) honours DESTDIR and the manifest.
install(CODE "set(_urxe_providerdir \"${URXE_INSTALL_PROVIDERDIR}\")
set(_urxe_driver_tmp \"${CMAKE_BINARY_DIR}/urxe.driver.install\")")
install(CODE [[
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr" OR CMAKE_INSTALL_PREFIX STREQUAL "/usr/")
    set(_urxe_driver_dir "/etc/libibverbs.d")
    # Resolved by libibverbs to its provider directory, exactly where the library was put.
    set(_urxe_driver_line "driver urxe")
  else()
    set(_urxe_driver_dir "${CMAKE_INSTALL_PREFIX}/etc/libibverbs.d")
    set(_urxe_driver_line "driver ${CMAKE_INSTALL_PREFIX}/${_urxe_providerdir}/liburxe")
  endif()
  file(MAKE_DIRECTORY "${_urxe_driver_tmp}")
  file(WRITE "${_urxe_driver_tmp}/urxe.driver" "${_urxe_driver_line}\n")
  file(INSTALL DESTINATION "${_urxe_driver_dir}" TYPE FILE PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ
       WORLD_READ FILES "${_urxe_driver_tmp}/urxe.driver")
]])

install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
foreach(_m wire engine dpdk provider tools)
  if(EXISTS ${CMAKE_SOURCE_DIR}/${_m}/README.md)
    install(FILES ${CMAKE_SOURCE_DIR}/${_m}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME README.${_m}.md)
  endif()
endforeach()

# --- CPack: one Debian package, urxe_<version>_<arch>.deb, in the build directory.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME urxe)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "urxe maintainers <urxe@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "userspace software RoCEv2 NIC (libibverbs provider and urxe command)")
# CPack puts CPACK_PACKAGE_DESCRIPTION_SUMMARY first; this is the long description after it.
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "urxe lets unmodified RDMA applications (libibverbs, rdma-core 44) talk RoCEv2 without RDMA hardware\n"
    "and without the kernel's Soft-RoCE driver: the provider liburxe-rdmav34.so runs the transport in the\n"
    "application's process over DPDK or a kernel packet socket. 'urxe link add urxe0 netdev eth0' creates\n"
    "a device; 'urxe run -- ibv_devinfo' runs an application against it.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends from dpkg-shlibdeps over the binary and the provider (libibverbs1, the DPDK libraries, libpcap,
# libstdc++ ...). The provider uses libibverbs' private ABI IBVERBS_PRIVATE_34, which libibverbs1's symbols
# file turns into a versioned dependency; a libibverbs with another private ABI would not load it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# `urxe link add` installs an nftables ingress drop when nft is there; ibverbs-utils to see the device.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "nftables, ibverbs-utils")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "perftest, rdma-core")
# /etc/libibverbs.d/urxe.driver is deliberately not a conffile: it only names this package's own library, so
# `dpkg -r` removes it with the library instead of leaving a .driver line that points at nothing.
set(CPACK_STRIP_FILES ON)
include(CPack)
