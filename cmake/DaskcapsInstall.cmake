# `cmake --install` of the library (cmake/DaskcapsLibrary.cmake), beside the
# binary and its files (the root CMakeLists.txt):
#
#   lib/libdaskcaps.so.<VERSION>, its SONAME link libdaskcaps.so.<SOVERSION>
#     and the link libdaskcaps.so; lib/libdaskcaps.a
#   include/daskcaps/<layer>/<name>.h   the public headers of core/<layer>/
#   include/daskcaps/formats/<name>.h   those of formats/
#   include/daskcaps/version.h          the version (macros and functions)
#   include/daskcaps/daskcaps.h         every public header at once
#   lib/cmake/daskcaps/                 find_package(daskcaps CONFIG): daskcaps::daskcaps,
#                                       daskcaps::daskcaps_static, the version file
#   lib/pkgconfig/daskcaps.pc           pkg-config
#
# (lib/ is CMAKE_INSTALL_LIBDIR: lib/<multiarch> for the prefix /usr.)
# detail/ folders hold the layers' private headers and are never installed;
# tests/library/test_headers.py checks that what is installed includes
# nothing else and that each header compiles on its own.
include(CMakePackageConfigHelpers)

foreach(layer ${DASKCAPS_LAYER_NAMES})
  install(FILES ${DASKCAPS_PUBLIC_HEADERS_${layer}} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/daskcaps/${layer})
endforeach()
install(FILES ${DASKCAPS_INCLUDE_DIR}/daskcaps/version.h ${DASKCAPS_INCLUDE_DIR}/daskcaps/daskcaps.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/daskcaps)

install(TARGETS daskcaps_shared daskcaps_static EXPORT daskcaps-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(DASKCAPS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/daskcaps)
install(EXPORT daskcaps-targets NAMESPACE daskcaps:: DESTINATION ${DASKCAPS_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/daskcapsConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/generated/daskcapsConfig.cmake
                              INSTALL_DESTINATION ${DASKCAPS_CMAKE_DIR})
# A 0.x release promises nothing to another minor version (the SONAME says
# the same: cmake/DaskcapsLibrary.cmake).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(compatibility SameMinorVersion)
else()
  set(compatibility SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/generated/daskcapsConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY ${compatibility})
install(FILES ${PROJECT_BINARY_DIR}/generated/daskcapsConfig.cmake
              ${PROJECT_BINARY_DIR}/generated/daskcapsConfigVersion.cmake
        DESTINATION ${DASKCAPS_CMAKE_DIR})

# daskcaps.pc finds its prefix from where it lies (${pcfiledir}), so the
# tree may be installed anywhere (cmake --install --prefix DIR).
set(pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
string(REGEX REPLACE "[^/]+" ".." DASKCAPS_PC_TO_PREFIX "${pc_dir}")
set(DASKCAPS_PC_DL "")
foreach(lib ${CMAKE_DL_LIBS})
  string(APPEND DASKCAPS_PC_DL " -l${lib}")
endforeach()
string(STRIP "${DASKCAPS_PC_DL}" DASKCAPS_PC_DL)
configure_file(${PROJECT_SOURCE_DIR}/cmake/daskcaps.pc.in ${PROJECT_BINARY_DIR}/generated/daskcaps.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/generated/daskcaps.pc DESTINATION ${pc_dir})
