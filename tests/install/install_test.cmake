# Included from tests/CMakeLists.txt: installs the built library into a
# temporary prefix and builds tests/install/ against it, as a user would.
# With the Python package built, also imports the installed package (its
# module must find the installed libductile by its rpath).
# Labelled `install` so sanitizer runs can leave it out (ctest -LE install).
if(TARGET _ductile)
  set(install_test_python ${Python_EXECUTABLE})
else()
  set(install_test_python "")
endif()
add_test(NAME install_find_package
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_install_test.sh
                 ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
                 ${install_test_python})
set_tests_properties(install_find_package PROPERTIES LABELS install TIMEOUT 300)
