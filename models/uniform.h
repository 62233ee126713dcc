// A uniform draw the same on every platform for a seed (unlike
// std::uniform_real_distribution): the models' initial weights and the
// synthetic data depend on nothing but their seeds.
#ifndef DUCTILE_MODELS_UNIFORM_H_
#define DUCTILE_MODELS_UNIFORM_H_

#include <random>

namespace ductile::models {

// A uniform double in [0, 1) from the top 53 bits of one draw.
inline double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace ductile::models

#endif  // DUCTILE_MODELS_UNIFORM_H_
