# Registration of the tests that need root and the host's network stack (network namespaces, veths,
# /dev/infiniband, /run/urxe, QEMU): they report SKIPPED (exit code 77) with the reason when they cannot
# run here (not root, a tool missing).
#
#   urxe_netns_test(NAME name COMMAND cmd [args...] LABELS label... [TIMEOUT seconds]
#                   [ENVIRONMENT VAR=value...] [RESOURCE_LOCK resource...] [SERIAL]
#                   [PROPERTIES prop value...])
#
# The test runs beside others: everything it creates has a name of its own (namespaces named after the
# script's pid, veths made inside them, a private mount namespace or URXE_RUN_DIR of its own, DPDK's
# per-process --file-prefix). The machine's cores stay over half idle while these tests wait on guests,
# carriers and listeners, so running them two at a time halves ctest's time. SERIAL: the test runs alone
# (RUN_SERIAL), for one that works on the build tree or the host as a whole. RESOURCE_LOCK: what it shares
# with other tests (e.g. the rxe guest). TIMEOUT defaults to 120 s. PROPERTIES: any other test properties
# (FIXTURES_REQUIRED, COST, ...).
function(urxe_netns_test)
  cmake_parse_arguments(PARSE_ARGV 0 T "SERIAL" "NAME;TIMEOUT"
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
  if(T_SERIAL)
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
