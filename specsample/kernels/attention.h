// Checks shared by the handlers that run cached attention (attention.cc, decoder_layer.cc).
#ifndef SPECSAMPLE_KERNELS_ATTENTION_H_
#define SPECSAMPLE_KERNELS_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kernel_ops.h"
#include "small_k_matmul.h"
#include "xla/ffi/api/ffi.h"

namespace specsample {

// Kernels for this CPU, head_dim a multiple of their vector width, every end in
// 0..capacity (`count` of them).
inline std::optional<xla::ffi::Error> CheckAttention(Isa isa, int64_t head_dim,
                                                     const int32_t* ends, int64_t count,
                                                     int64_t capacity) {
  if (isa == Isa::kNone) {
    return xla::ffi::Error(xla::ffi::ErrorCode::kUnimplemented,
                           "cached_attention: no AVX-512 or AVX2 + FMA kernels for this CPU");
  }
  const int64_t lanes = isa == Isa::kAvx512 ? 16 : 8;
  if (head_dim % lanes != 0) {
    return xla::ffi::Error::InvalidArgument("cached_attention: head_dim must be a multiple of " +
                                            std::to_string(lanes));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (ends[i] < 0 || ends[i] > capacity) {
      return xla::ffi::Error::InvalidArgument("cached_attention: ends must be in 0..capacity");
    }
  }
  return std::nullopt;
}

// The caches' number type: keys and values both float32 or both bfloat16 (or uint16 holding
// bfloat16's bit patterns, as models.kv_cache keeps a compact cache).
inline std::optional<xla::ffi::Error> CacheNumbersOf(xla::ffi::DataType keys,
                                                     xla::ffi::DataType values,
                                                     CacheNumbers* numbers) {
  if (keys == values && keys == xla::ffi::DataType::F32) {
    *numbers = CacheNumbers::kFloat32;
  } else if (keys == values &&
             (keys == xla::ffi::DataType::BF16 || keys == xla::ffi::DataType::U16)) {
    *numbers = CacheNumbers::kBfloat16;
  } else {
    return xla::ffi::Error::InvalidArgument(
        "cached_attention: keys and values must both be float32 or both bfloat16");
  }
  return std::nullopt;
}

}  // namespace specsample

#endif  // SPECSAMPLE_KERNELS_ATTENTION_H_
