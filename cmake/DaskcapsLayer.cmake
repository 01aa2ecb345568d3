# daskcaps_layer(NAME [DIR folder] DEPS targets...)
#
# Adds the object library daskcaps_NAME from the sources of one folder
# (default: the folder NAME beside this call, with its internal/ and detail/
# subfolders),
# compiled position-independent (its objects go into libdaskcaps.so and
# libdaskcaps.a alike: daskcaps_library() below), with the usage
# requirements of DEPS (the layers below it and external libraries). The
# layer's name, its layers below (all of them, through DEPS) and its external
# libraries are recorded in global properties for daskcaps_library().
#
# With DASKCAPS_BUILD_LAYER_CHECKS, also daskcaps_layer_check_NAME: an
# executable of the layer's objects and those of the layers below it only,
# so that a symbol the layer takes from a layer above it is an undefined
# reference at link time.
#
# The three kinds of header (docs/design.md §2): a layer's own folder holds
# its public headers (installed); internal/ the headers other layers above
# it use but a program of the library does not (not installed); detail/ the
# layer's private ones. What the shared library exports: the sources of
# internal/ and detail/ are compiled with hidden visibility, so nothing they
# define leaves libdaskcaps.so (the static library, the in-tree tests and
# benches and the layer checks still link them). The version script
# (cmake/daskcaps.map.in) then exports only the daskcaps namespace of what
# remains: the public headers' API.
function(daskcaps_layer name)
  cmake_parse_arguments(L "" "DIR" "DEPS" ${ARGN})
  if(NOT L_DIR)
    set(L_DIR ${CMAKE_CURRENT_SOURCE_DIR}/${name})
  endif()
  file(GLOB sources CONFIGURE_DEPENDS ${L_DIR}/*.cpp)
  file(GLOB hidden_sources CONFIGURE_DEPENDS ${L_DIR}/internal/*.cpp ${L_DIR}/detail/*.cpp)
  add_library(daskcaps_${name} OBJECT ${sources} ${hidden_sources})
  # Inline functions are hidden (-fvisibility-inlines-hidden): each program
  # compiles its own, and a detail/ class's inline members (a template's
  # among them) that a public source uses but does not inline (Debug, the
  # sanitizer build) do not leave the library either.
  set_target_properties(daskcaps_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON VISIBILITY_INLINES_HIDDEN ON)
  if(hidden_sources)
    set_source_files_properties(${hidden_sources} TARGET_DIRECTORY daskcaps_${name}
                                PROPERTIES COMPILE_OPTIONS "-fvisibility=hidden")
  endif()
  # GCC assumes that an exported function compiled -fPIC may be replaced at
  # run time (LD_PRELOAD), and so neither inlines nor clones it inside the
  # library: the layers' own calls would be slower in libdaskcaps.a than in
  # the executables of before. Nobody interposes our functions; clang
  # already assumes so.
  target_compile_options(daskcaps_${name} PRIVATE
    $<$<CXX_COMPILER_ID:GNU>:-fno-semantic-interposition>)
  target_include_directories(daskcaps_${name} PUBLIC
    $<BUILD_INTERFACE:${DASKCAPS_INCLUDE_DIR}> $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_link_libraries(daskcaps_${name} PUBLIC ${L_DEPS})

  # The layers below (all of them) and the external libraries.
  set(below "")
  set(external "")
  foreach(dep ${L_DEPS})
    if(dep MATCHES "^daskcaps_(.+)$")
      get_property(dep_below GLOBAL PROPERTY DASKCAPS_LAYER_BELOW_${CMAKE_MATCH_1})
      list(APPEND below ${CMAKE_MATCH_1} ${dep_below})
    else()
      list(APPEND external ${dep})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES below)
  set_property(GLOBAL PROPERTY DASKCAPS_LAYER_BELOW_${name} ${below})
  set_property(GLOBAL APPEND PROPERTY DASKCAPS_LAYERS ${name})
  set_property(GLOBAL PROPERTY DASKCAPS_LAYER_DIR_${name} ${L_DIR})
  set_property(GLOBAL APPEND PROPERTY DASKCAPS_EXTERNAL_LIBS ${external})

  if(DASKCAPS_BUILD_LAYER_CHECKS)
    set(below_objects "")
    foreach(layer ${below})
      list(APPEND below_objects $<TARGET_OBJECTS:daskcaps_${layer}>)
    endforeach()
    add_executable(daskcaps_layer_check_${name} ${PROJECT_SOURCE_DIR}/cmake/layer_check_main.cpp ${below_objects})
    # Linking the object library adds its own objects (and, through it, the
    # usage requirements of everything below); the layers below add theirs.
    target_link_libraries(daskcaps_layer_check_${name} PRIVATE daskcaps_${name})
    set_target_properties(daskcaps_layer_check_${name} PROPERTIES
      RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/layer-check)
  endif()
endfunction()
