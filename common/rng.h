// SplitMix64: small, fast, and fully specified, so data order and initialisation are the same on
// every platform and can be checkpointed as one 64-bit state.
#pragma once

#include <cmath>
#include <cstdint>

namespace fp8rt {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed = 0) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0); the tiny modulo bias is irrelevant for shuffling and init.
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Uniform in [0, 1) with 24 random bits.
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  // Standard normal by Box-Muller (one value per call).
  float Normal() {
    float u1 = Uniform(), u2 = Uniform();
    if (u1 < 1e-12f) u1 = 1e-12f;
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
  }
  // Moves the stream on by n draws of Next() (2n for n Normal()s) in O(1): the state after k
  // draws is seed + k * gamma, so a stream can be split into pieces drawn on several threads.
  void Skip(uint64_t n) { state_ += n * 0x9E3779B97F4A7C15ull; }
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

}  // namespace fp8rt
