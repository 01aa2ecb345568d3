# daskcaps_layer(NAME [DIR folder] DEPS targets...)
#
# Adds the static library daskcaps_NAME from the sources of one folder
# (default: the folder NAME beside this call, with its detail/ subfolder),
# linked PUBLIC to DEPS (the layers below it and external libraries), and
# daskcaps_layer_check_NAME: an executable that takes every object of the
# layer (--whole-archive) and only DEPS, so that a symbol the layer takes
# from a layer above it is an undefined reference at link time.
function(daskcaps_layer name)
  cmake_parse_arguments(L "" "DIR" "DEPS" ${ARGN})
  if(NOT L_DIR)
    set(L_DIR ${CMAKE_CURRENT_SOURCE_DIR}/${name})
  endif()
  file(GLOB sources CONFIGURE_DEPENDS ${L_DIR}/*.cpp ${L_DIR}/detail/*.cpp)
  add_library(daskcaps_${name} STATIC ${sources})
  target_include_directories(daskcaps_${name} PUBLIC ${DASKCAPS_INCLUDE_DIR} ${PROJECT_SOURCE_DIR})
  target_compile_definitions(daskcaps_${name} PUBLIC DASKCAPS_VERSION="${PROJECT_VERSION}")
  target_link_libraries(daskcaps_${name} PUBLIC ${L_DEPS})

  add_executable(daskcaps_layer_check_${name} ${PROJECT_SOURCE_DIR}/cmake/layer_check_main.cpp)
  target_link_libraries(daskcaps_layer_check_${name} PRIVATE
    "$<LINK_LIBRARY:WHOLE_ARCHIVE,daskcaps_${name}>" ${L_DEPS})
  set_target_properties(daskcaps_layer_check_${name} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/layer-check)
endfunction()
