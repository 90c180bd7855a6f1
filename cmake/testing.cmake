# Test tiers and labels (README "Tests"). Every ctest test carries exactly one tier label:
#   unit       one module (or one file format, one script's rules) on its own: no server,
#              no FUSE mount
#   component  several modules together (the caches over the local backend with fault
#              injection), or a program against real local servers or tools (radosgw,
#              nginx, systemd-analyze, cmake --install): no FUSE mount
#   mount      through a real FUSE mount of the pagefs daemon
# and one or more area labels: what it is about, the tests/ directory it lives in (backends,
# cache, fuse, rest, ctl, tools, ...; tests/mount's are fuse), plus s3 / http for tests that
# need the radosgw / nginx fixture, and the labels that keep a test out of the default suite
# (bench, soak, fresh). pagefs_check_test_tiers() fails the configuration for a test added
# without pagefs_test_labels().
set(PAGEFS_TEST_TIERS unit component mount)

# pagefs_test_labels(NAME TIER AREA...): sets the LABELS of test NAME (defined in the current
# directory) to its tier and areas.
function(pagefs_test_labels name tier)
  if(NOT tier IN_LIST PAGEFS_TEST_TIERS)
    message(FATAL_ERROR "test ${name}: '${tier}' is not a tier (${PAGEFS_TEST_TIERS})")
  endif()
  if(NOT ARGN)
    message(FATAL_ERROR "test ${name}: no area label")
  endif()
  foreach(label IN LISTS ARGN)
    if(label IN_LIST PAGEFS_TEST_TIERS)
      message(FATAL_ERROR "test ${name}: two tiers (${tier}, ${label})")
    endif()
  endforeach()
  set_tests_properties(${name} PROPERTIES LABELS "${tier};${ARGN}")
  set_property(GLOBAL APPEND PROPERTY PAGEFS_LABELLED_TESTS ${name})
endfunction()

# pagefs_check_test_tiers(): every test in the source tree went through pagefs_test_labels().
function(pagefs_check_test_tiers)
  get_property(labelled GLOBAL PROPERTY PAGEFS_LABELLED_TESTS)
  set(dirs ${CMAKE_SOURCE_DIR})
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(tests DIRECTORY ${dir} PROPERTY TESTS)
    foreach(t IN LISTS tests)
      if(NOT t IN_LIST labelled)
        message(FATAL_ERROR "test ${t} (${dir}) has no tier: use pagefs_test_labels()")
      endif()
    endforeach()
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
  endwhile()
endfunction()
