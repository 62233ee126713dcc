# Data and model code for the built-in training apps: the Fashion-MNIST
# loader, epoch partitioning, synthetic data and logistic regression.
# Independent of the network and client code. Included from
# apps/CMakeLists.txt.
add_library(ductile_models STATIC
  ${CMAKE_CURRENT_LIST_DIR}/fmnist_data.cc
  ${CMAKE_CURRENT_LIST_DIR}/logreg_model.cc)
target_include_directories(ductile_models PUBLIC
  ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(ductile_models PUBLIC ZLIB::ZLIB)
