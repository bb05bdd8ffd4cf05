// y = x @ w for a few rows of x: the matrix products of decoding and verification on CPUs.
//
// x: float32 [k, d] (k <= kMaxRows), w: float32 [d, n] (row-major, as Flax stores kernels),
// y: float32 [k, n]. At small k each weight is used k times after it is loaded, so the
// product is as fast as the weights can be streamed from memory, if (1) the weights are read
// in the order they lie in memory, (2) loads are issued far enough ahead to hide memory
// latency, and (3) the k x 16*C running sums stay in registers while a strip of rows is
// consumed. General matrix libraries block for large k and reach a sixth to a third of
// their peak at k = 8 (docs/benchmarks.md); this kernel does the three things above and
// nothing else.
//
// Work is split over threads by rows of w (each thread streams a contiguous part of it);
// each thread sums into its own [k, n] buffer, added up at the end.
#ifndef SPECSAMPLE_KERNELS_SMALL_K_MATMUL_H_
#define SPECSAMPLE_KERNELS_SMALL_K_MATMUL_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace specsample {

constexpr int64_t kMaxRows = 64;       // rows of x the kernels take
constexpr int64_t kRowsPerGroup = 16;  // rows per group of the transposed kernel (16 lanes)
// Rows per group in PartialProduct: up to 9 rows keep 3 vectors of sums per row (27
// registers); 10-16 rows would keep 1-2, and re-reading a strip of w from L1 for a second
// group costs less than that (measured: 16 rows as 2 x 8 are up to 1.7x faster).
constexpr int64_t kRowsPerStripGroup = 9;

struct Tuning {
  int64_t strip_rows;      // rows of w consumed between loads/stores of the running sums
  int64_t prefetch_bytes;  // how far ahead on each row of w to prefetch
  int64_t chunk_columns;   // columns of y kept hot at a time ([k, chunk] floats in L2)
};

inline Tuning DefaultTuning(int64_t k) {
  // Measured on AMD Zen 4 (2 cores) with [k, 2048] x [2048, 8192]: one row wants short
  // strips and a long prefetch (pure streaming); more rows want long strips so the sums'
  // loads and stores vanish next to the multiply-adds. The [k, chunk] sums stay <= 256 KiB.
  if (k <= 3) return {8, 1024, 4096};
  const int64_t chunk = k <= 16 ? 4096 : (65536 / k) / 16 * 16;
  return {64, 512, chunk};
}

// Running sums: R rows x C vectors of 16 floats. Registers needed: R*C + C + 1 <= 32.
template <int R>
constexpr int VectorsPerRow() {
  static_assert(R >= 1 && R <= kRowsPerStripGroup, "more rows go in groups");
  return R <= 2 ? 8 : R <= 3 ? 6 : R <= 5 ? 4 : 3;
}

// acc[R][16C] = y[R, 16C] + x[R, strip] @ w[strip, 16C]; `tail` masks the last vector.
template <int R, int C>
__attribute__((target("avx512f"), always_inline)) inline void Strip(
    const float* x, int64_t ldx, const float* w, int64_t ldw, float* y, int64_t ldy,
    int64_t strip, int64_t prefetch_bytes, __mmask16 tail) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      acc[r][c] = _mm512_maskz_loadu_ps(c == C - 1 ? tail : 0xFFFF, y + r * ldy + 16 * c);
  for (int64_t i = 0; i < strip; ++i) {
    const float* row = w + i * ldw;
    __m512 wv[C];
    for (int c = 0; c < C; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(row + 16 * c) + prefetch_bytes, _MM_HINT_T1);
      wv[c] = _mm512_maskz_loadu_ps(c == C - 1 ? tail : 0xFFFF, row + 16 * c);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * ldx + i]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(xr, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * c, c == C - 1 ? tail : 0xFFFF, acc[r][c]);
}

// y[R, j0:j1] += x[R, strip] @ w[strip, j0:j1]: one strip of rows of w, all its panels.
// x points at x[0, s], w at w[s, 0], y at y[0, 0]; row strides d (x) and n (w, y).
template <int R>
__attribute__((target("avx512f"))) void StripOfRows(
    const float* x, int64_t d, const float* w, int64_t n, float* y, int64_t j0, int64_t j1,
    int64_t strip, int64_t prefetch_bytes) {
  constexpr int C = VectorsPerRow<R>();
  int64_t j = j0;
  for (; j + 16 * C <= j1; j += 16 * C)
    Strip<R, C>(x, d, w + j, n, y + j, n, strip, prefetch_bytes, 0xFFFF);
  for (; j < j1; j += 16) {
    const int64_t left = j1 - j;
    const __mmask16 tail = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
    Strip<R, 1>(x, d, w + j, n, y + j, n, strip, prefetch_bytes, tail);
  }
}

using StripFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                         int64_t, int64_t);

inline StripFn StripFor(int64_t rows) {
  static constexpr StripFn kTable[kRowsPerStripGroup + 1] = {
      nullptr,        StripOfRows<1>, StripOfRows<2>, StripOfRows<3>, StripOfRows<4>,
      StripOfRows<5>, StripOfRows<6>, StripOfRows<7>, StripOfRows<8>, StripOfRows<9>};
  return kTable[rows];
}

// One thread's share: y[k, n] = x[k, i0:i1] @ w[i0:i1, n] (overwrites y). More than
// kRowsPerStripGroup rows are taken in balanced groups over the same strip of w,
// which the later groups find in the caches: w is still read from memory once.
inline void PartialProduct(const float* x, int64_t k, int64_t d, const float* w, int64_t n,
                           float* y, int64_t i0, int64_t i1, const Tuning& t) {
  std::memset(y, 0, sizeof(float) * k * n);
  const int64_t groups = (k + kRowsPerStripGroup - 1) / kRowsPerStripGroup;
  for (int64_t j0 = 0; j0 < n; j0 += t.chunk_columns) {
    const int64_t j1 = j0 + t.chunk_columns < n ? j0 + t.chunk_columns : n;
    for (int64_t s = i0; s < i1; s += t.strip_rows) {
      const int64_t strip = s + t.strip_rows < i1 ? t.strip_rows : i1 - s;
      for (int64_t g = 0, r0 = 0; g < groups; ++g) {
        const int64_t rows = (k - r0) / (groups - g);  // balanced groups
        StripFor(rows)(x + r0 * d + s, d, w + s * n, n, y + r0 * n, j0, j1, strip,
                       t.prefetch_bytes);
        r0 += rows;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// The transposed product y = x @ e.T, e float32 [n, d] row-major (a tied embedding used as
// the output layer).
//
// One row of x: y[j] is the dot product of x with e[j], J rows of e at a time.
template <int J>
__attribute__((target("avx512f"), always_inline)) inline void Dots(
    const float* x, const float* e, int64_t d, float* y, int64_t prefetch_bytes) {
  __m512 acc[J];
  for (int jj = 0; jj < J; ++jj) acc[jj] = _mm512_setzero_ps();
  for (int64_t i = 0; i < d; i += 16) {
    const __mmask16 m = d - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (d - i)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    for (int jj = 0; jj < J; ++jj) {
      _mm_prefetch(reinterpret_cast<const char*>(e + jj * d + i) + prefetch_bytes, _MM_HINT_T1);
      acc[jj] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, e + jj * d + i), acc[jj]);
    }
  }
  for (int jj = 0; jj < J; ++jj) y[jj] = _mm512_reduce_add_ps(acc[jj]);
}

// y[j0:j1] = x[d] @ e[j0:j1, d].T.
__attribute__((target("avx512f"))) inline void RowTimesEmbedding(
    const float* x, int64_t d, const float* e, float* y, int64_t j0, int64_t j1,
    int64_t prefetch_bytes) {
  constexpr int J = 8;
  int64_t j = j0;
  for (; j + J <= j1; j += J) Dots<J>(x, e + j * d, d, y + j, prefetch_bytes);
  for (; j < j1; ++j) Dots<1>(x, e + j * d, d, y + j, prefetch_bytes);
}

// With 2..16 rows of x, a better order: x is packed transposed and padded, xt[d][L] with
// L = 8 or 16 lanes, and each element of e, broadcast, multiplies the L-vector of x's
// column: one multiply-add per element of e for all rows at once, M rows of e at a time,
// no horizontal sums, and xt (d * L floats) stays in cache.
template <int L>
struct Lanes;

template <>
struct Lanes<16> {
  using V = __m512;
  __attribute__((target("avx512f"), always_inline)) static V Zero() {
    return _mm512_setzero_ps();
  }
  __attribute__((target("avx512f"), always_inline)) static V Load(const float* p) {
    return _mm512_loadu_ps(p);
  }
  __attribute__((target("avx512f"), always_inline)) static V MulAdd(float a, V b, V c) {
    return _mm512_fmadd_ps(_mm512_set1_ps(a), b, c);
  }
  __attribute__((target("avx512f"), always_inline)) static void Store(float* p, V v) {
    _mm512_storeu_ps(p, v);
  }
};

template <>
struct Lanes<8> {
  using V = __m256;
  __attribute__((target("avx2,fma"), always_inline)) static V Zero() {
    return _mm256_setzero_ps();
  }
  __attribute__((target("avx2,fma"), always_inline)) static V Load(const float* p) {
    return _mm256_loadu_ps(p);
  }
  __attribute__((target("avx2,fma"), always_inline)) static V MulAdd(float a, V b, V c) {
    return _mm256_fmadd_ps(_mm256_set1_ps(a), b, c);
  }
  __attribute__((target("avx2,fma"), always_inline)) static void Store(float* p, V v) {
    _mm256_storeu_ps(p, v);
  }
};

// y[0:k, 0:M] (row stride ldy) = x @ e[0:M].T, x given as xt[d][L].
template <int M, int L>
__attribute__((target("avx512f,avx2,fma"), always_inline)) inline void BroadcastRows(
    const float* xt, const float* e, int64_t d, float* y, int64_t ldy, int64_t k,
    int64_t prefetch_bytes) {
  using Ops = Lanes<L>;
  typename Ops::V acc[M];
  for (int m = 0; m < M; ++m) acc[m] = Ops::Zero();
  for (int64_t i = 0; i < d; ++i) {
    if ((i & 15) == 0) {
      for (int m = 0; m < M; ++m)
        _mm_prefetch(reinterpret_cast<const char*>(e + m * d + i) + prefetch_bytes, _MM_HINT_T1);
    }
    const typename Ops::V xv = Ops::Load(xt + i * L);
    for (int m = 0; m < M; ++m) acc[m] = Ops::MulAdd(e[m * d + i], xv, acc[m]);
  }
  alignas(64) float lanes[L];
  for (int m = 0; m < M; ++m) {
    Ops::Store(lanes, acc[m]);
    for (int64_t r = 0; r < k; ++r) y[r * ldy + m] = lanes[r];
  }
}

template <int L>
__attribute__((target("avx512f,avx2,fma"))) void BroadcastEmbedding(
    const float* xt, int64_t k, int64_t d, const float* e, int64_t n, float* y, int64_t j0,
    int64_t j1, int64_t prefetch_bytes) {
  constexpr int M = 12;  // rows of e at a time: 12 independent chains of multiply-adds
  int64_t j = j0;
  for (; j + M <= j1; j += M) BroadcastRows<M, L>(xt, e + j * d, d, y + j, n, k, prefetch_bytes);
  for (; j < j1; ++j) BroadcastRows<1, L>(xt, e + j * d, d, y + j, n, k, prefetch_bytes);
}

// One thread's share: y[k, j0:j1] = x[k, d] @ e[j0:j1, d].T (row stride of y: n). One row
// of x takes the dot-product kernel; more rows go, <= 16 at a time, through the broadcast
// kernel, over blocks of e's rows small enough to stay cached between the groups.
inline void EmbeddingProduct(const float* x, int64_t k, int64_t d, const float* e, int64_t n,
                             float* y, int64_t j0, int64_t j1, int64_t prefetch_bytes) {
  if (k == 1) {
    RowTimesEmbedding(x, d, e, y, j0, j1, prefetch_bytes);
    return;
  }
  const int64_t groups = (k + kRowsPerGroup - 1) / kRowsPerGroup;
  const int64_t lanes = k <= 8 ? 8 : 16;
  thread_local std::vector<float> packed;
  packed.assign(groups * d * lanes, 0.0f);
  int64_t group_rows[kMaxRows / kRowsPerGroup + 1];
  for (int64_t g = 0, r0 = 0; g < groups; ++g) {
    group_rows[g] = (k - r0) / (groups - g);
    float* xt = packed.data() + g * d * lanes;
    for (int64_t r = 0; r < group_rows[g]; ++r)
      for (int64_t i = 0; i < d; ++i) xt[i * lanes + r] = x[(r0 + r) * d + i];
    r0 += group_rows[g];
  }
  const int64_t block = groups == 1 ? j1 - j0 : std::max<int64_t>(12, (128 << 10) / (4 * d));
  for (int64_t b0 = j0; b0 < j1; b0 += block) {
    const int64_t b1 = b0 + block < j1 ? b0 + block : j1;
    for (int64_t g = 0, r0 = 0; g < groups; ++g) {
      const float* xt = packed.data() + g * d * lanes;
      if (lanes == 8) {
        BroadcastEmbedding<8>(xt, group_rows[g], d, e, n, y + r0 * n, b0, b1, prefetch_bytes);
      } else {
        BroadcastEmbedding<16>(xt, group_rows[g], d, e, n, y + r0 * n, b0, b1, prefetch_bytes);
      }
      r0 += group_rows[g];
    }
  }
}

}  // namespace specsample

#endif  // SPECSAMPLE_KERNELS_SMALL_K_MATMUL_H_
