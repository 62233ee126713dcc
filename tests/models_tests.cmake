# Tests of models/: the data readers, the models and the compute backends.
# Included from tests/CMakeLists.txt after ductile_add_test is defined.
# fmnist_data_test reads /usr/share/datasets/fashion-mnist (Debian package
# dataset-fashion-mnist) and writes its own gzip files, hence ZLIB.
ductile_add_test(fmnist_data_test)
target_link_libraries(fmnist_data_test PRIVATE ductile_models ZLIB::ZLIB)

ductile_add_test(logreg_model_test)
target_link_libraries(logreg_model_test PRIVATE ductile_models)

# Tests of the compute backends, the MLP and matrix factorization.
# compute_backend_test and mlp_model_test run their CUDA cases only
# where a GPU is present and skip them otherwise.
foreach(test compute_backend_test mlp_model_test mf_model_test)
  ductile_add_test(${test})
  target_link_libraries(${test} PRIVATE ductile_models)
endforeach()
