// The small-k kernels for one instruction set. No include guard: small_k_matmul.h includes
// this file once per instruction set, inside namespace specsample::<isa>, after defining
// there
//   Vec                    Lanes<L>, the widest vectors of the instruction set,
//   kRowsPerStripGroup     the most rows of x that share a strip of w in PartialProduct,
//   VectorsPerRow<R>()     the vectors of sums each of R rows keeps in registers,
//   kDotRows, kDotVectors  rows of e per step of Dots, and vectors of sums per row,
//   kBroadcastSteps        elements of each row of e per step of BroadcastRows,
// and the macro SPECSAMPLE_SIMD (the target attribute of the instruction set). Only the
// kernel functions carry that attribute; the code that splits the work into kernel calls
// (PartialProduct, EmbeddingProduct) is plain x86-64, like the standard library code it
// uses, so nothing outside the kernels can contain the instruction set's instructions.
// Include nothing here (this is inside a namespace): small_k_matmul.h includes it all.

// acc[R][L*C] = y[R, L*C] + x[R, strip] @ w[strip, L*C] (L = Vec::kLanes); with kTail
// (C = 1), only the lanes of `tail`.
template <int R, int C, bool kTail>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void Strip(
    const float* x, int64_t ldx, const float* w, int64_t ldw, float* y, int64_t ldy,
    int64_t strip, int64_t prefetch_bytes, typename Vec::Mask tail) {
  static_assert(!kTail || C == 1, "only a single vector takes a tail");
  constexpr int L = Vec::kLanes;
  typename Vec::V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      acc[r][c] = kTail ? Vec::Load(y + r * ldy + L * c, tail) : Vec::Load(y + r * ldy + L * c);
  for (int64_t i = 0; i < strip; ++i) {
    const float* row = w + i * ldw;
    typename Vec::V wv[C];
    for (int c = 0; c < C; ++c) {
      if ((L * c) % 16 == 0)  // one prefetch per 64 bytes
        _mm_prefetch(reinterpret_cast<const char*>(row + L * c) + prefetch_bytes, _MM_HINT_T1);
      wv[c] = kTail ? Vec::Load(row + L * c, tail) : Vec::Load(row + L * c);
    }
    for (int r = 0; r < R; ++r) {
      const typename Vec::V xr = Vec::Broadcast(x[r * ldx + i]);
      for (int c = 0; c < C; ++c) acc[r][c] = Vec::MulAdd(xr, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      if (kTail) {
        Vec::Store(y + r * ldy + L * c, tail, acc[r][c]);
      } else {
        Vec::Store(y + r * ldy + L * c, acc[r][c]);
      }
    }
}

// y[R, j0:j1] += x[R, strip] @ w[strip, j0:j1]: one strip of rows of w, all its panels.
// x points at x[0, s], w at w[s, 0], y at y[0, 0]; row strides d (x) and n (w, y).
template <int R>
SPECSAMPLE_SIMD void StripOfRows(const float* x, int64_t d, const float* w, int64_t n, float* y,
                                 int64_t j0, int64_t j1, int64_t strip, int64_t prefetch_bytes) {
  constexpr int C = VectorsPerRow<R>();
  constexpr int L = Vec::kLanes;
  int64_t j = j0;
  for (; j + L * C <= j1; j += L * C)
    Strip<R, C, false>(x, d, w + j, n, y + j, n, strip, prefetch_bytes, Vec::Tail(L));
  for (; j < j1; j += L)
    Strip<R, 1, true>(x, d, w + j, n, y + j, n, strip, prefetch_bytes, Vec::Tail(j1 - j));
}

using StripFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                         int64_t, int64_t);

// StripOfRows<rows> for rows = 1 .. kRowsPerStripGroup.
template <int... R>
inline StripFn StripFor(int64_t rows, std::integer_sequence<int, R...>) {
  static constexpr StripFn kTable[] = {nullptr, StripOfRows<R + 1>...};
  return kTable[rows];
}

inline StripFn StripFor(int64_t rows) {
  return StripFor(rows, std::make_integer_sequence<int, kRowsPerStripGroup>());
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
// One row of x: y[j] is the dot product of x with e[j], J rows of e at a time, each row
// summed in A vectors (A consecutive vectors of it per step).
template <int J, int A>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void Dots(const float* x, const float* e,
                                                                int64_t d, float* y,
                                                                int64_t prefetch_bytes) {
  constexpr int L = Vec::kLanes;
  static_assert(L * A % 16 == 0, "steps of whole 64-byte lines");
  typename Vec::V acc[J][A];
  for (int jj = 0; jj < J; ++jj)
    for (int a = 0; a < A; ++a) acc[jj][a] = Vec::Zero();
  int64_t i = 0;
  for (; i + L * A <= d; i += L * A) {
    for (int a = 0; a < A; ++a) {
      const typename Vec::V xv = Vec::Load(x + i + L * a);
      for (int jj = 0; jj < J; ++jj) {
        const float* row = e + jj * d + i + L * a;
        if (L * a % 16 == 0)  // one prefetch per 64 bytes
          _mm_prefetch(reinterpret_cast<const char*>(row) + prefetch_bytes, _MM_HINT_T1);
        acc[jj][a] = Vec::MulAdd(xv, Vec::Load(row), acc[jj][a]);
      }
    }
  }
  for (; i < d; i += L) {  // the tail of the rows, d % (L * A) floats
    const typename Vec::Mask m = Vec::Tail(d - i);
    const typename Vec::V xv = Vec::Load(x + i, m);
    for (int jj = 0; jj < J; ++jj)
      acc[jj][0] = Vec::MulAdd(xv, Vec::Load(e + jj * d + i, m), acc[jj][0]);
  }
  for (int jj = 0; jj < J; ++jj) {
    for (int a = 1; a < A; ++a) acc[jj][0] = Vec::Add(acc[jj][0], acc[jj][a]);
    y[jj] = Vec::Sum(acc[jj][0]);
  }
}

// y[j0:j1] = x[d] @ e[j0:j1, d].T.
SPECSAMPLE_SIMD inline void RowTimesEmbedding(const float* x, int64_t d, const float* e, float* y,
                                              int64_t j0, int64_t j1, int64_t prefetch_bytes) {
  constexpr int J = kDotRows, A = kDotVectors;
  int64_t j = j0;
  for (; j + J <= j1; j += J) Dots<J, A>(x, e + j * d, d, y + j, prefetch_bytes);
  for (; j < j1; ++j) Dots<1, A>(x, e + j * d, d, y + j, prefetch_bytes);
}

// With 2..kRowsPerGroup rows of x, a better order: x is packed transposed and padded,
// xt[d][L] with L = 8 or 16 lanes (16 only with AVX-512), and each element of e, broadcast,
// multiplies the L-vector of x's column: one multiply-add per element of e for all rows at
// once, M rows of e at a time, no horizontal sums, and xt (d * L floats) stays in cache.
constexpr int64_t kRowsPerGroup = Vec::kLanes;  // rows per group of the broadcast kernel

// y[0:k, 0:M] (row stride ldy) = x @ e[0:M].T, x given as xt[d][L].
template <int M, int L>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void BroadcastRows(
    const float* xt, const float* e, int64_t d, float* y, int64_t ldy, int64_t k,
    int64_t prefetch_bytes) {
  using Ops = Lanes<L>;
  typename Ops::V acc[M];
  for (int m = 0; m < M; ++m) acc[m] = Ops::Zero();
  constexpr int U = kBroadcastSteps;
  int64_t i = 0;
  for (; i + U <= d; i += U) {
    if ((i & 15) < U) {  // one prefetch per 64 bytes of each row (U divides 16)
      for (int m = 0; m < M; ++m)
        _mm_prefetch(reinterpret_cast<const char*>(e + m * d + i) + prefetch_bytes, _MM_HINT_T1);
    }
    for (int u = 0; u < U; ++u) {
      const typename Ops::V xv = Ops::Load(xt + (i + u) * L);
      for (int m = 0; m < M; ++m)
        acc[m] = Ops::MulAdd(Ops::Broadcast(e[m * d + i + u]), xv, acc[m]);
    }
  }
  for (; i < d; ++i) {  // the last d % U elements
    const typename Ops::V xv = Ops::Load(xt + i * L);
    for (int m = 0; m < M; ++m) acc[m] = Ops::MulAdd(Ops::Broadcast(e[m * d + i]), xv, acc[m]);
  }
  alignas(64) float lanes[L];
  for (int m = 0; m < M; ++m) {
    Ops::Store(lanes, acc[m]);
    for (int64_t r = 0; r < k; ++r) y[r * ldy + m] = lanes[r];
  }
}

template <int L>
SPECSAMPLE_SIMD void BroadcastEmbedding(const float* xt, int64_t k, int64_t d, const float* e,
                                        int64_t n, float* y, int64_t j0, int64_t j1,
                                        int64_t prefetch_bytes) {
  // 12 rows of e at a time: 12 independent chains of multiply-adds, 12 + 2 registers.
  constexpr int M = 12;
  int64_t j = j0;
  for (; j + M <= j1; j += M) BroadcastRows<M, L>(xt, e + j * d, d, y + j, n, k, prefetch_bytes);
  for (; j < j1; ++j) BroadcastRows<1, L>(xt, e + j * d, d, y + j, n, k, prefetch_bytes);
}

// One thread's share: y[k, j0:j1] = x[k, d] @ e[j0:j1, d].T (row stride of y: n). One row
// of x takes the dot-product kernel; more rows go, <= kRowsPerGroup at a time, through the
// broadcast kernel, over blocks of e's rows small enough to stay cached between the groups.
inline void EmbeddingProduct(const float* x, int64_t k, int64_t d, const float* e, int64_t n,
                             float* y, int64_t j0, int64_t j1, int64_t prefetch_bytes) {
  if (k == 1) {
    RowTimesEmbedding(x, d, e, y, j0, j1, prefetch_bytes);
    return;
  }
  const int64_t groups = (k + kRowsPerGroup - 1) / kRowsPerGroup;
  const int64_t lanes = k <= 8 ? 8 : kRowsPerGroup;
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
  // Blocks of whole 12-row steps of BroadcastEmbedding, whose leftover rows take the 1-row
  // step, a chain of d dependent multiply-adds per row (blocks of 128 KiB / (4 d) rows, 21
  // for d = 1536, made the products of more than one group about 2x slower).
  const int64_t block =
      groups == 1 ? j1 - j0 : std::max<int64_t>(1, (128 << 10) / (4 * d) / 12) * 12;
  for (int64_t b0 = j0; b0 < j1; b0 += block) {
    const int64_t b1 = b0 + block < j1 ? b0 + block : j1;
    for (int64_t g = 0, r0 = 0; g < groups; ++g) {
      const float* xt = packed.data() + g * d * lanes;
      if (lanes == 8) {
        BroadcastEmbedding<8>(xt, group_rows[g], d, e, n, y + r0 * n, b0, b1, prefetch_bytes);
      } else {
        BroadcastEmbedding<Vec::kLanes>(xt, group_rows[g], d, e, n, y + r0 * n, b0, b1,
                                        prefetch_bytes);
      }
      r0 += group_rows[g];
    }
  }
}
