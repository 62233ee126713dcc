// The target that owns the tests' precompiled header (tests/CMakeLists.txt:
// ductile_test_pch): gtest's main and no tests.
