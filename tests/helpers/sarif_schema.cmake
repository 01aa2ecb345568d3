# Test setup for the SARIF test: fetches the official sarif-2.1.0.json from
# npm into ${PROJECT_BINARY_DIR}/sarif/ (cached there), or is skipped with a
# notice when npm is missing (tests/helpers/fetch_sarif_schema.sh).
add_test(NAME setup.sarif_schema
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/fetch_sarif_schema.sh ${PROJECT_BINARY_DIR})
set_tests_properties(setup.sarif_schema PROPERTIES
  LABELS e2e FIXTURES_SETUP sarif_schema SKIP_RETURN_CODE 77 TIMEOUT 300)
