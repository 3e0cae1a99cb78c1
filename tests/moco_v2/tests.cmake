# MoCo v1/v2's config refusals end to end (v2_cli_test.sh); included by tests/CMakeLists.txt for each
# method room.
foreach(case keys_refused_elsewhere accepts sizes_bounded micro_batch)
  add_test(NAME moco_v2.cli.${case} COMMAND ${CMAKE_CURRENT_LIST_DIR}/v2_cli_test.sh ${case} ${CMAKE_BINARY_DIR}
                                            ${CMAKE_CURRENT_BINARY_DIR}/moco_v2_cli_${case})
  set_tests_properties(moco_v2.cli.${case} PROPERTIES TIMEOUT 300)
endforeach()
