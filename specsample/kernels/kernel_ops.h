// The kernels' entry points shared between the XLA FFI handlers of the extension's files
// (small_k_matmul.cc: products; attention.cc: cached attention; decoder_layer.cc: the
// fused halves of a decoder layer). Each runs one piece of work on the calling thread and
// SpinPool's threads.
#ifndef SPECSAMPLE_KERNELS_KERNEL_OPS_H_
#define SPECSAMPLE_KERNELS_KERNEL_OPS_H_

#include <cstdint>

#include "int8_matmul.h"
#include "small_k_matmul.h"

namespace specsample {

// The instruction set the kernels use now (SpecsampleSmallKMatmulUseIsa), and the
// integer one of the 8-bit-activation products it implies.
Isa ActiveKernelIsa();
IntIsa ActiveIntIsa();

// Rows x [k, d] (row stride ldx) quantized into `a` (int8_matmul.h) in `passes` passes: 1
// (a.k = k rows), or 2 (a.k = 2k rows: row k + r holds row r's rounding error, quantized;
// the two rows' products are added by AddSecondPass). Rows r0 .. r1 - 1 of x only (r1 < 0:
// to the last): each row is quantized on its own, so threads may share the rows.
void QuantizeActivations(IntIsa isa, const float* x, int64_t ldx, const Activations& a,
                         int passes = 1, int64_t r0 = 0, int64_t r1 = -1);

// y[i] = partial[i] + partial[count + i] for i < count: each row's product from its two
// passes' partial products (the first pass's rows, then the errors' rows).
void AddSecondPass(const float* partial, int64_t count, float* y);

// Part of a product of quantized rows with a packed matrix of n rows: y[k, n] (row stride
// n) for the rows of W in groups g0..g1.
void Int8ProductPart(IntIsa isa, Packed format, const Activations& a, const uint8_t* w,
                     int64_t group_bytes, int64_t n, float* y, int64_t g0, int64_t g1);

// Cached attention (attention.cc): out [B, K, H, D] of queries [B, K, H, D] over the caches
// keys, values [B, C, KV, D] (float32 or bfloat16: `numbers`), each query seeing the entries `allowed` [B, K, C] marks before
// its end `ends` [B, K]; on `threads` threads in all. head_dim a multiple of the vector
// width of `isa` (16 floats for AVX-512, 8 for AVX2).
// How the caches hold their numbers: float32, or bfloat16 (widened to float32 as read).
enum class CacheNumbers { kFloat32, kBfloat16 };

void CachedAttentionRows(Isa isa, int threads, const float* queries, CacheNumbers numbers,
                         const void* keys, const void* values, const bool* allowed,
                         const int32_t* ends, int64_t batch, int64_t rows, int64_t heads,
                         int64_t kv_heads, int64_t head_dim, int64_t capacity, float scale,
                         float* out);

}  // namespace specsample

#endif  // SPECSAMPLE_KERNELS_KERNEL_OPS_H_
