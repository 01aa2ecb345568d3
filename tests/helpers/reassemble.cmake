add_executable(reassemble ${CMAKE_CURRENT_SOURCE_DIR}/tools/reassemble.cpp)
target_link_libraries(reassemble PRIVATE daskcaps)
