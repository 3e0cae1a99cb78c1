# Run after moco_tests is linked (cmake -P): one ctest entry per GoogleTest suite, named "Suite.*",
# running that suite's cases in one process. A process costs ~1 s before its first test (LibTorch
# loads), so one per case spent most of the suite's time starting up; cases of a suite share a
# fixture or a theme and no process state. "Suite.*" keeps every "^Suite\." regex working.
#
#   -D TEST_EXECUTABLE=... -D OUT=<file to write> -D LABELS=<suite_labels.cmake from tests/CMakeLists.txt>
cmake_minimum_required(VERSION 3.18)  # IN_LIST, in script mode too
include(${LABELS})  # MOCO_INTEROP_SUITES, MOCO_SUITE_TIMEOUT
execute_process(COMMAND ${TEST_EXECUTABLE} --gtest_list_tests OUTPUT_VARIABLE listing RESULT_VARIABLE rc
                ERROR_VARIABLE errors TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${rc}): ${errors}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(body "")
set(count 0)
foreach(line IN LISTS lines)
  # Suites start in column 0 and end with '.'; parameterised ones read "Prefix/Suite.  # TypeParam = ..".
  if(NOT line MATCHES "^([^ #][^ ]*)\\.")
    continue()
  endif()
  set(suite ${CMAKE_MATCH_1})
  if(suite MATCHES "^DISABLED_")
    continue()
  endif()
  set(labels unit)
  if(suite IN_LIST MOCO_INTEROP_SUITES)
    set(labels interop)
  endif()
  math(EXPR count "${count} + 1")
  string(APPEND body
    "add_test([=[${suite}.*]=] [==[${TEST_EXECUTABLE}]==] [=[--gtest_filter=${suite}.*]=] --gtest_brief=1)\n"
    "set_tests_properties([=[${suite}.*]=] PROPERTIES LABELS \"${labels}\" TIMEOUT ${MOCO_SUITE_TIMEOUT}"
    " ENVIRONMENT OMP_NUM_THREADS=1 SKIP_RETURN_CODE 77)\n")
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests listed no suite")
endif()
file(WRITE ${OUT} "# ${count} suites of ${TEST_EXECUTABLE} (written by tests/gtest_suites.cmake)\n${body}")
