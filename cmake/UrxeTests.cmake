# Registration of the tests that need root and the host's network stack (network namespaces, veths,
# /dev/infiniband, /run/urxe, QEMU): they report SKIPPED (exit code 77) with the reason when they cannot
# run here (not root, a tool missing).
#
#   urxe_netns_test(NAME name COMMAND cmd [args...] LABELS label... [TIMEOUT seconds]
#                   [ENVIRONMENT VAR=value...] [RESOURCE_LOCK resource...] [PRIVATE_NETNS]
#                   [PROPERTIES prop value...])
#
# By default the test runs alone (RUN_SERIAL): it creates namespaces, veths and addresses with fixed names.
# PRIVATE_NETNS: everything it creates lives in private mount + network namespaces of its own
# (tests/lib/netns.sh netns_private), so it may run beside other tests. RESOURCE_LOCK: what it shares with
# other tests that are not RUN_SERIAL (e.g. the rxe guest). TIMEOUT defaults to 120 s. PROPERTIES: any
# other test properties (FIXTURES_REQUIRED, ...).
function(urxe_netns_test)
  cmake_parse_arguments(PARSE_ARGV 0 T "PRIVATE_NETNS" "NAME;TIMEOUT"
                        "COMMAND;LABELS;ENVIRONMENT;RESOURCE_LOCK;PROPERTIES")
  if(NOT T_NAME OR NOT T_COMMAND OR NOT T_LABELS)
    message(FATAL_ERROR "urxe_netns_test: NAME, COMMAND and LABELS are required")
  endif()
  if(T_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "urxe_netns_test(${T_NAME}): unknown arguments ${T_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
  if(NOT T_PRIVATE_NETNS)
    set_tests_properties(${T_NAME} PROPERTIES RUN_SERIAL ON)
  endif()
  if(T_ENVIRONMENT)
    set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${T_ENVIRONMENT}")
  endif()
  if(T_RESOURCE_LOCK)
    set_tests_properties(${T_NAME} PROPERTIES RESOURCE_LOCK "${T_RESOURCE_LOCK}")
  endif()
  if(T_PROPERTIES)
    set_tests_properties(${T_NAME} PROPERTIES ${T_PROPERTIES})
  endif()
endfunction()
