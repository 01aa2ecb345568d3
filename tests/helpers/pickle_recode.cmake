# tests/tools/pickle_recode: runs a batch of pickles through the pickle
# engine in one process, for tests/e2e/test_pickle_oracle.py (which finds it
# as $DASKCAPS_BUILD_DIR/tests/pickle_recode).
add_executable(pickle_recode ${CMAKE_CURRENT_SOURCE_DIR}/tools/pickle_recode.cpp)
target_link_libraries(pickle_recode PRIVATE daskcaps)
