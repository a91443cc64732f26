# Installs the non-binary files (systemd unit, default config, examples, Kubernetes manifests)
# and configures CPack to build a Debian package:
#   cmake -S . -B build-pkg -G Ninja -DCMAKE_INSTALL_PREFIX=/usr -DSH_BUILD_TESTS=OFF -DSH_BUILD_BENCH=OFF
#   ninja -C build-pkg && (cd build-pkg && cpack -G DEB)
# The programs are installed by agent/CMakeLists.txt and ctl/CMakeLists.txt.
include(GNUInstallDirs)

# With CMAKE_INSTALL_PREFIX=/usr this is /etc (GNUInstallDirs' special case), otherwise
# <prefix>/etc. It is absolute, so stage an install with DESTDIR, not with --prefix.
set(SH_CONFIG_DIR "${CMAKE_INSTALL_FULL_SYSCONFDIR}/stagehand")

install(FILES systemd/stagehand.service DESTINATION lib/systemd/system)
install(FILES packaging/config.yaml DESTINATION "${SH_CONFIG_DIR}"
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
# The default --manifest-dir; empty until volumes are declared.
install(DIRECTORY DESTINATION "${SH_CONFIG_DIR}/volumes.d")
install(FILES packaging/example-volume.yaml DESTINATION "${CMAKE_INSTALL_DOCDIR}/examples")
install(DIRECTORY deploy/kubernetes/ DESTINATION "${CMAKE_INSTALL_DATADIR}/stagehand/kubernetes"
        FILES_MATCHING PATTERN "*.yaml")
# The Helm chart, the alert rules (plain and as a PrometheusRule) and the Grafana dashboard.
install(DIRECTORY deploy/helm/stagehand DESTINATION "${CMAKE_INSTALL_DATADIR}/stagehand/helm")
install(DIRECTORY deploy/monitoring/ DESTINATION "${CMAKE_INSTALL_DATADIR}/stagehand/monitoring"
        FILES_MATCHING PATTERN "*.yaml" PATTERN "*.json")

# --- CPack: Debian package --------------------------------------------------------------------
set(CPACK_PACKAGE_NAME stagehand)
set(CPACK_PACKAGE_VENDOR "stagehand developers")
set(CPACK_PACKAGE_CONTACT "stagehand developers <dev@stagehand.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "node storage agent with a built-in iSCSI CSI node plugin")
set(CPACK_PACKAGE_DESCRIPTION
    "stagehand keeps declared volumes staged and published on a host, registers CSI node plugins
like the kubelet does, and brings its own iSCSI CSI node plugin with a userspace data path
(libiscsi, FUSE, loop devices). It runs as a systemd service or as a Kubernetes DaemonSet.")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_PACKAGE_NAME stagehand)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "stagehand developers <dev@stagehand.invalid>")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
find_program(SH_DPKG dpkg)
if(SH_DPKG)
  execute_process(COMMAND ${SH_DPKG} --print-architecture
                  OUTPUT_VARIABLE CPACK_DEBIAN_PACKAGE_ARCHITECTURE
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()

# Programs stagehand runs (mkfs.ext4, e2fsck, resize2fs; mkfs.xfs, xfs_growfs) and util-linux
# (FUSE needs only the kernel: stagehand speaks its protocol itself, as root); the shared libraries are found by dpkg-shlibdeps when it is there
# (package dpkg-dev), else listed by hand for Debian 12.
set(_sh_tools "e2fsprogs, xfsprogs, util-linux")
find_program(SH_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(SH_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_sh_tools}")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "${_sh_tools}, libiscsi7, libgrpc++1.51, libgrpc29, libprotobuf32, \
libabsl20220623, libyaml-cpp0.7, libspdlog1.10, libfmt9, libmount1, libblkid1, libsystemd0, libsdbus-c++1, \
libprometheus-cpp-pull1.0, libprometheus-cpp-core1.0, libcivetweb1, libssl3, libstdc++6, libgcc-s1, libc6")
endif()
# open-iscsi and multipath-tools: the kernel transport (the userspace one needs neither).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd, open-iscsi")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "multipath-tools, tgt")

# Control files: the config is a conffile (dpkg keeps local edits on upgrade and asks), and
# postinst reloads systemd.
set(_sh_control_dir "${PROJECT_BINARY_DIR}/packaging/deb")
file(MAKE_DIRECTORY "${_sh_control_dir}")
file(WRITE "${_sh_control_dir}/conffiles" "${SH_CONFIG_DIR}/config.yaml\n")
configure_file(packaging/deb/postinst "${_sh_control_dir}/postinst" COPYONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${_sh_control_dir}/conffiles;${_sh_control_dir}/postinst")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
