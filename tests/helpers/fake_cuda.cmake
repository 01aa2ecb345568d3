# A stand-in CUDA driver library (tests/helpers/fake_cuda.c) for testing the
# GPU probe on hosts without a GPU. The unit tests get its path as
# DASKCAPS_FAKE_CUDA; the end-to-end tests find it at
# ${PROJECT_BINARY_DIR}/tests/helpers/libfake_cuda.so.
add_library(fake_cuda SHARED ${CMAKE_CURRENT_LIST_DIR}/fake_cuda.c)
set_target_properties(fake_cuda PROPERTIES
  C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/helpers)
if(TARGET daskcaps_tests)
  add_dependencies(daskcaps_tests fake_cuda)
  target_compile_definitions(daskcaps_tests PRIVATE DASKCAPS_FAKE_CUDA="$<TARGET_FILE:fake_cuda>")
endif()
