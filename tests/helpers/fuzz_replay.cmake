# Fuzz replays (docs/design.md §9.4): every tests/fuzz/fuzz_<name>.cpp is also linked
# with the plain driver tests/fuzz/replay_main.cpp as replay_<name>, and the
# CTest test fuzz-replay.<name> (label fuzz) runs it over the committed
# inputs in tests/fuzz/regressions/<name>/ (inputs that once crashed, and
# tricky ones) plus the seed corpus ${PROJECT_BINARY_DIR}/fuzz-corpus/<name>/
# when it has been generated (`cmake --build build --target fuzz-corpus`).
# No clang needed: this is the normal build. libFuzzer builds: tests/fuzz/.
set(DASKCAPS_FUZZ_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz)
file(GLOB DASKCAPS_FUZZ_SOURCES CONFIGURE_DEPENDS ${DASKCAPS_FUZZ_DIR}/fuzz_*.cpp)
add_library(fuzz_replay_main OBJECT ${DASKCAPS_FUZZ_DIR}/replay_main.cpp)
foreach(src ${DASKCAPS_FUZZ_SOURCES})
  get_filename_component(target ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" name ${target})
  add_executable(replay_${name} ${src} $<TARGET_OBJECTS:fuzz_replay_main>)
  target_link_libraries(replay_${name} PRIVATE daskcaps nlohmann_json::nlohmann_json)
  set_target_properties(replay_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/fuzz)
  add_test(NAME fuzz-replay.${name}
           COMMAND replay_${name} ${DASKCAPS_FUZZ_DIR}/regressions/${name}
                   --if-exists ${PROJECT_BINARY_DIR}/fuzz-corpus/${name})
  set_tests_properties(fuzz-replay.${name} PROPERTIES LABELS fuzz TIMEOUT 300)
endforeach()

# Seed corpora from the real Dask (needs /usr/bin/python3 with python3-distributed).
add_custom_target(fuzz-corpus
  COMMAND /usr/bin/python3 ${DASKCAPS_FUZZ_DIR}/make_corpus.py ${PROJECT_BINARY_DIR}/fuzz-corpus
          --dask-caps $<TARGET_FILE:dask-caps>
  DEPENDS dask-caps
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
  COMMENT "Generating fuzz seed corpora in ${PROJECT_BINARY_DIR}/fuzz-corpus"
  VERBATIM)
