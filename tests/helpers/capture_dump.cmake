# capture_dump (tests/tools/capture_dump.cpp): prints the connections and
# messages of a pcap/pcapng capture as JSON lines, through the library's
# formats/internal/capture.h. The end-to-end test tests/e2e/test_pcap_capture.py runs
# it from ${PROJECT_BINARY_DIR}/tests/tools/capture_dump.
add_executable(capture_dump ${CMAKE_CURRENT_LIST_DIR}/../tools/capture_dump.cpp)
target_link_libraries(capture_dump PRIVATE daskcaps nlohmann_json::nlohmann_json)
set_target_properties(capture_dump PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/tools)
if(TARGET daskcaps_tests)
  add_dependencies(daskcaps_tests capture_dump)
endif()
