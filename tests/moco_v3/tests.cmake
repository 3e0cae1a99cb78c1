# MoCo v3's config refusals end to end (v3_cli_test.sh), and the linear protocol on a v3 ViT:
# pre-trained, then read from its folder and its export (vit_lincls_test.sh). Included by
# tests/CMakeLists.txt for each method room.
foreach(case keys_refused_elsewhere checks sizes_bounded official_heads fp16_needs_cuda micro_batch)
  add_test(NAME moco_v3.cli.${case} COMMAND ${CMAKE_CURRENT_LIST_DIR}/v3_cli_test.sh ${case} ${CMAKE_BINARY_DIR}
                                            ${CMAKE_CURRENT_BINARY_DIR}/moco_v3_cli_${case})
  set_tests_properties(moco_v3.cli.${case} PROPERTIES TIMEOUT 300)
endforeach()
foreach(case v3_vit_tiny_np2)
  add_test(NAME lincls.${case} COMMAND ${CMAKE_CURRENT_LIST_DIR}/vit_lincls_test.sh ${case} ${CMAKE_BINARY_DIR}
                                       ${CMAKE_CURRENT_BINARY_DIR}/lincls_${case})
  set_tests_properties(lincls.${case} PROPERTIES TIMEOUT 300)
endforeach()
