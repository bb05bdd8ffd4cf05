// The small-k kernels for one instruction set. No include guard: small_k_matmul.h includes
// this file once per instruction set, inside namespace specsample::<isa>, after defining
// there
//   Vec                    Lanes<L>, the widest vectors of the instruction set,
//   kRowsPerStripGroup     the most rows of x that share a strip of w in PartialProduct,
//   VectorsPerRow<R>()     the vectors of sums each of R rows keeps in registers,
//   kTileRows              the most rows of x in a tile of the transposed product,
//   TileColumns<R>()       the rows of e in a tile of R rows of x,
//   kBlockTileRows, BlockTileColumns<R>()   the same for e in GGUF blocks,
// and the macro SPECSAMPLE_SIMD (the target attribute of the instruction set). Only the
// kernel functions carry that attribute; the code that splits the work into kernel calls
// (PartialProduct, EmbeddingProduct) is plain x86-64, like the standard library code it
// uses, so nothing outside the kernels can contain the instruction set's instructions.
// Include nothing here (this is inside a namespace): small_k_matmul.h includes it all.
//
// The weights (w, e) are float or Bf16 (W below), and e also a GGUF block format (BlockQ8_0,
// BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ4_K, BlockQ6_K); x and y are float32 always.

// The first `left` weights at p (all L when left >= L) widened to float32, zeros in the
// other lanes; reads nothing past them.
SPECSAMPLE_SIMD __attribute__((always_inline)) inline typename Vec::V LoadTail(const float* p,
                                                                              int64_t left) {
  return Vec::Load(p, Vec::Tail(left));
}
SPECSAMPLE_SIMD __attribute__((always_inline)) inline typename Vec::V LoadTail(const Bf16* p,
                                                                              int64_t left) {
  alignas(64) float lanes[Vec::kLanes] = {};
  for (int64_t l = 0; l < left && l < Vec::kLanes; ++l) lanes[l] = Widen(p[l]);
  return Vec::Load(lanes);
}

// Weights per 64-byte cache line: one prefetch per line.
template <typename W>
constexpr int64_t kPerLine = 64 / sizeof(W);

// acc[R][L*C] = y[R, L*C] + x[R, strip] @ w[strip, L*C] (L = Vec::kLanes); with kTail
// (C = 1), only the first `left` lanes (`tail` is their mask).
template <int R, int C, bool kTail, typename W>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void Strip(
    const float* x, int64_t ldx, const W* w, int64_t ldw, float* y, int64_t ldy, int64_t strip,
    int64_t prefetch_bytes, typename Vec::Mask tail, int64_t left) {
  static_assert(!kTail || C == 1, "only a single vector takes a tail");
  constexpr int L = Vec::kLanes;
  typename Vec::V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      acc[r][c] = kTail ? Vec::Load(y + r * ldy + L * c, tail) : Vec::Load(y + r * ldy + L * c);
  for (int64_t i = 0; i < strip; ++i) {
    const W* row = w + i * ldw;
    typename Vec::V wv[C];
    for (int c = 0; c < C; ++c) {
      if ((L * c) % kPerLine<W> == 0)  // one prefetch per 64 bytes
        _mm_prefetch(reinterpret_cast<const char*>(row + L * c) + prefetch_bytes, _MM_HINT_T1);
      wv[c] = kTail ? LoadTail(row + L * c, left) : Vec::Load(row + L * c);
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
template <int R, typename W>
SPECSAMPLE_SIMD void StripOfRows(const float* x, int64_t d, const W* w, int64_t n, float* y,
                                 int64_t j0, int64_t j1, int64_t strip, int64_t prefetch_bytes) {
  constexpr int C = VectorsPerRow<R>();
  constexpr int L = Vec::kLanes;
  int64_t j = j0;
  for (; j + L * C <= j1; j += L * C)
    Strip<R, C, false>(x, d, w + j, n, y + j, n, strip, prefetch_bytes, Vec::Tail(L), L);
  for (; j < j1; j += L)
    Strip<R, 1, true>(x, d, w + j, n, y + j, n, strip, prefetch_bytes, Vec::Tail(j1 - j), j1 - j);
}

template <typename W>
using StripFn = void (*)(const float*, int64_t, const W*, int64_t, float*, int64_t, int64_t,
                         int64_t, int64_t);

// StripOfRows<rows> for rows = 1 .. kRowsPerStripGroup.
template <typename W, int... R>
inline StripFn<W> StripFor(int64_t rows, std::integer_sequence<int, R...>) {
  static constexpr StripFn<W> kTable[] = {nullptr, StripOfRows<R + 1, W>...};
  return kTable[rows];
}

template <typename W>
inline StripFn<W> StripFor(int64_t rows) {
  return StripFor<W>(rows, std::make_integer_sequence<int, kRowsPerStripGroup>());
}

// One thread's share: y[k, n] = x[k, i0:i1] @ w[i0:i1, n] (overwrites y). More than
// kRowsPerStripGroup rows are taken in balanced groups over the same strip of w,
// which the later groups find in the caches: w is still read from memory once. Each sum
// y[r, j] runs over i0..i1 in order whatever k, the strips and the groups are.
template <typename W>
inline void PartialProduct(const float* x, int64_t k, int64_t d, const W* w, int64_t n, float* y,
                           int64_t i0, int64_t i1, const Tuning& t) {
  std::memset(y, 0, sizeof(float) * k * n);
  const int64_t groups = (k + kRowsPerStripGroup - 1) / kRowsPerStripGroup;
  for (int64_t j0 = 0; j0 < n; j0 += t.chunk_columns) {
    const int64_t j1 = j0 + t.chunk_columns < n ? j0 + t.chunk_columns : n;
    for (int64_t s = i0; s < i1; s += t.strip_rows) {
      const int64_t strip = s + t.strip_rows < i1 ? t.strip_rows : i1 - s;
      for (int64_t g = 0, r0 = 0; g < groups; ++g) {
        const int64_t rows = (k - r0) / (groups - g);  // balanced groups
        StripFor<W>(rows)(x + r0 * d + s, d, w + s * n, n, y + r0 * n, j0, j1, strip,
                          t.prefetch_bytes);
        r0 += rows;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// The transposed product y = x @ e.T, e [n, d] row-major (a tied embedding used as the
// output layer).
//
// Tiles of R rows of x by J rows of e: each pair (r, j) sums x[r] * e[j] in one vector of
// L partial sums, over the row in steps of L numbers (the tail masked into the same
// vector), then adds the L lanes up. That order is the same for every R and J, so a row's
// results do not depend on the rows beside it (row-count invariance); within a tile each
// vector of e is loaded (and widened) once for R rows, and each vector of x once for J.
template <int R, int J, typename W>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void DotTile(const float* x, const W* e,
                                                                   int64_t d, float* y,
                                                                   int64_t ldy,
                                                                   int64_t prefetch_bytes) {
  constexpr int L = Vec::kLanes;
  typename Vec::V acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) acc[r][j] = Vec::Zero();
  int64_t i = 0;
  for (; i + L <= d; i += L) {
    typename Vec::V xv[R];
    for (int r = 0; r < R; ++r) xv[r] = Vec::Load(x + r * d + i);
    for (int j = 0; j < J; ++j) {
      const W* row = e + j * d + i;
      if (i % kPerLine<W> == 0)  // one prefetch per 64 bytes
        _mm_prefetch(reinterpret_cast<const char*>(row) + prefetch_bytes, _MM_HINT_T1);
      const typename Vec::V ev = Vec::Load(row);
      for (int r = 0; r < R; ++r) acc[r][j] = Vec::MulAdd(xv[r], ev, acc[r][j]);
    }
  }
  if (i < d) {  // the tail of the rows, d % L numbers
    typename Vec::V xv[R];
    for (int r = 0; r < R; ++r) xv[r] = Vec::Load(x + r * d + i, Vec::Tail(d - i));
    for (int j = 0; j < J; ++j) {
      const typename Vec::V ev = LoadTail(e + j * d + i, d - i);
      for (int r = 0; r < R; ++r) acc[r][j] = Vec::MulAdd(xv[r], ev, acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) y[r * ldy + j] = Vec::Sum(acc[r][j]);
}

SPECSAMPLE_SIMD __attribute__((always_inline)) inline float ToFloat(Half h) {
  return _cvtsh_ss(h);  // exact
}

// Reads one GGUF block of e in steps of L weights: Step(s) is weights s * L .. s * L + L - 1
// of the block as float32 (L divides 32), the gguf package's values exactly. The block's
// constants (scales, minimums) are decoded once, when the reader is made.
template <typename B>
struct BlockReader;

template <>
struct BlockReader<BlockQ8_0> {
  const BlockQ8_0& b;
  typename Vec::V d;
  SPECSAMPLE_SIMD __attribute__((always_inline)) explicit BlockReader(const BlockQ8_0& block)
      : b(block), d(Vec::Broadcast(ToFloat(block.d))) {}
  SPECSAMPLE_SIMD __attribute__((always_inline)) typename Vec::V Step(int s) const {
    return Vec::Mul(d, Vec::LoadInt8(b.qs + s * Vec::kLanes));
  }
};

template <>
struct BlockReader<BlockQ4_0> {
  const BlockQ4_0& b;
  typename Vec::V d;
  SPECSAMPLE_SIMD __attribute__((always_inline)) explicit BlockReader(const BlockQ4_0& block)
      : b(block), d(Vec::Broadcast(ToFloat(block.d))) {}
  SPECSAMPLE_SIMD __attribute__((always_inline)) typename Vec::V Step(int s) const {
    const int first = s * Vec::kLanes;  // weights 0..15: low nibbles; 16..31: high nibbles
    const typename Vec::V q = Vec::LoadNibbles(b.qs + first % 16, first >= 16);
    return Vec::Mul(d, Vec::Add(q, Vec::Broadcast(-8.0f)));
  }
};

template <>
struct BlockReader<BlockQ4_1> {
  const BlockQ4_1& b;
  typename Vec::V d, m;
  SPECSAMPLE_SIMD __attribute__((always_inline)) explicit BlockReader(const BlockQ4_1& block)
      : b(block), d(Vec::Broadcast(ToFloat(block.d))), m(Vec::Broadcast(ToFloat(block.m))) {}
  SPECSAMPLE_SIMD __attribute__((always_inline)) typename Vec::V Step(int s) const {
    const int first = s * Vec::kLanes;
    // d * q is exact, so the fused multiply-add rounds once, as d * q + m does.
    return Vec::MulAdd(d, Vec::LoadNibbles(b.qs + first % 16, first >= 16), m);
  }
};

template <>
struct BlockReader<BlockQ5_0> {
  const BlockQ5_0& b;
  typename Vec::V d;
  uint32_t qh;  // bit i: the fifth bit of weight i
  SPECSAMPLE_SIMD __attribute__((always_inline)) explicit BlockReader(const BlockQ5_0& block)
      : b(block), d(Vec::Broadcast(ToFloat(block.d))) {
    std::memcpy(&qh, block.qh, sizeof(qh));
  }
  SPECSAMPLE_SIMD __attribute__((always_inline)) typename Vec::V Step(int s) const {
    const int first = s * Vec::kLanes;  // d * q is exact (11 x 5 bits)
    return Vec::Mul(d, Vec::LoadFiveBits(b.qs + first % 16, first >= 16, qh, first));
  }
};

template <>
struct BlockReader<BlockQ4_K> {
  const BlockQ4_K& b;
  float scale[8], minus_minimum[8];  // per sub-block of 32: d * sc_j, -(dmin * m_j)
  SPECSAMPLE_SIMD __attribute__((always_inline)) explicit BlockReader(const BlockQ4_K& block)
      : b(block) {
    const float d = ToFloat(block.d), dmin = ToFloat(block.dmin);
    const uint8_t* q = block.scales;  // 6-bit scales and minimums, packed
    for (int j = 0; j < 8; ++j) {
      const int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
      scale[j] = d * static_cast<float>(sc);            // exact
      minus_minimum[j] = -(dmin * static_cast<float>(m));  // exact
    }
  }
  SPECSAMPLE_SIMD __attribute__((always_inline)) typename Vec::V Step(int s) const {
    const int first = s * Vec::kLanes, j = first / 32;  // sub-block j: chunk j / 2 of qs
    const typename Vec::V q = Vec::LoadNibbles(b.qs + (j / 2) * 32 + first % 32, j % 2);
    // (d * sc) * q is exact, so the fused multiply-add rounds once, as d * q - dm does.
    return Vec::MulAdd(Vec::Broadcast(scale[j]), q, Vec::Broadcast(minus_minimum[j]));
  }
};

template <>
struct BlockReader<BlockQ6_K> {
  const BlockQ6_K& b;
  float scale[16];  // per group of 16 weights: d * sc (exact)
  SPECSAMPLE_SIMD __attribute__((always_inline)) explicit BlockReader(const BlockQ6_K& block)
      : b(block) {
    const float d = ToFloat(block.d);
    for (int g = 0; g < 16; ++g) scale[g] = d * static_cast<float>(block.scales[g]);
  }
  SPECSAMPLE_SIMD __attribute__((always_inline)) typename Vec::V Step(int s) const {
    // Weight w: half h = w / 128; in it, quarter t = (w % 128) / 32 takes ql[h * 64 + (t % 2)
    // * 32 + l] (low nibble for t < 2, high after) and bits 2t, 2t + 1 of qh[h * 32 + l].
    const int w = s * Vec::kLanes, h = w / 128, t = (w % 128) / 32, l = w % 32;
    const typename Vec::V q =
        Vec::LoadSixBits(b.ql + h * 64 + (t % 2) * 32 + l, t >= 2, b.qh + h * 32 + l, 2 * t);
    return Vec::Mul(Vec::Broadcast(scale[w / 16]), q);  // rounded once, as gguf's d * q
  }
};

// DotTile for e in GGUF blocks (d a multiple of the block's weights): the same sums in the
// same order (each pair (r, j) in one vector, over the row in steps of L), so the product
// equals DotTile's on the dequantized float32 weights bit for bit. Each block of e is
// dequantized once per tile, into the R rows' sums; x is read from L1 by the multiply-adds
// (no registers held), so a tile takes up to kBlockTileRows rows.
// xp: the tile's R rows of x packed by 32 weights, [d / 32][R][32] (one pointer, constant
// offsets: no registers held for row addresses).
template <int R, int J, typename B>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void BlockDotTile(const float* xp,
                                                                        const B* e, int64_t d,
                                                                        float* y, int64_t ldy,
                                                                        int64_t prefetch_bytes) {
  constexpr int L = Vec::kLanes;
  constexpr int kSteps = kWeightsPer<B> / L;
  constexpr int kStepsPer32 = kBlockWeights / L;  // steps per 32 weights of packed x
  const int64_t blocks = d / kWeightsPer<B>;
  typename Vec::V acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) acc[r][j] = Vec::Zero();
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = xp + b * R * kWeightsPer<B>;
    for (int j = 0; j < J; ++j) {
      const B& block = e[j * blocks + b];
      for (int64_t line = 0; line < static_cast<int64_t>(sizeof(B)); line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(&block) + line + prefetch_bytes, _MM_HINT_T1);
      const BlockReader<B> reader(block);
#pragma GCC unroll 32  // constant offsets and lanes in every step
      for (int s = 0; s < kSteps; ++s) {
        const typename Vec::V ev = reader.Step(s);
        const float* xs = xb + (s / kStepsPer32) * R * kBlockWeights + (s % kStepsPer32) * L;
        for (int r = 0; r < R; ++r)
          acc[r][j] = Vec::MulAdd(Vec::Load(xs + r * kBlockWeights), ev, acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) y[r * ldy + j] = Vec::Sum(acc[r][j]);
}

// y[0:R, j0:j1] (row stride n) = x[0:R, d] @ e[j0:j1, d].T, TileColumns<R>() rows of e at a
// time. A row of e is d / kWeightsPer<W> W's (numbers, or GGUF blocks).
template <int R, typename W>
SPECSAMPLE_SIMD void RowsTimesEmbedding(const float* x, int64_t d, const W* e, int64_t n,
                                        float* y, int64_t j0, int64_t j1,
                                        int64_t prefetch_bytes) {
  const int64_t row = d / kWeightsPer<W>;
  int64_t j = j0;
  if constexpr (kIsBlock<W>) {  // x: the R rows packed by block (BlockDotTile)
    constexpr int J = BlockTileColumns<R>();
    for (; j + J <= j1; j += J) BlockDotTile<R, J>(x, e + j * row, d, y + j, n, prefetch_bytes);
    for (; j < j1; ++j) BlockDotTile<R, 1>(x, e + j * row, d, y + j, n, prefetch_bytes);
  } else {
    constexpr int J = TileColumns<R>();
    for (; j + J <= j1; j += J) DotTile<R, J>(x, e + j * row, d, y + j, n, prefetch_bytes);
    for (; j < j1; ++j) DotTile<R, 1>(x, e + j * row, d, y + j, n, prefetch_bytes);
  }
}

template <typename W>
using RowsFn = void (*)(const float*, int64_t, const W*, int64_t, float*, int64_t, int64_t,
                        int64_t);

// RowsTimesEmbedding<rows> for rows = 1 .. kTileRows (kBlockTileRows for GGUF blocks).
template <typename W, int... R>
inline RowsFn<W> RowsFor(int64_t rows, std::integer_sequence<int, R...>) {
  static constexpr RowsFn<W> kTable[] = {nullptr, RowsTimesEmbedding<R + 1, W>...};
  return kTable[rows];
}

template <typename W>
inline RowsFn<W> RowsFor(int64_t rows) {
  constexpr int kRows = kIsBlock<W> ? kBlockTileRows : kTileRows;
  return RowsFor<W>(rows, std::make_integer_sequence<int, kRows>());
}

// One thread's share: y[k, j0:j1] = x[k, d] @ e[j0:j1, d].T (row stride of y: n). The rows
// of x go in balanced groups of <= kTileRows, over blocks of e's rows small enough to stay
// cached while the groups take them in turn (e is read from memory once).
// e in GGUF blocks takes groups of <= kBlockTileRows rows (BlockDotTile keeps no rows of x
// in registers, so its tiles can have more rows).
template <typename W>
inline void EmbeddingProduct(const float* x, int64_t k, int64_t d, const W* e, int64_t n,
                             float* y, int64_t j0, int64_t j1, int64_t prefetch_bytes) {
  constexpr int64_t kRows = kIsBlock<W> ? kBlockTileRows : kTileRows;
  const int64_t groups = (k + kRows - 1) / kRows;
  const int64_t block =
      groups == 1 ? j1 - j0
                  : std::max<int64_t>(kEmbeddingBlockRows,
                                      kEmbeddingBlockBytes / (sizeof(W) * d / kWeightsPer<W>) /
                                          kEmbeddingBlockRows * kEmbeddingBlockRows);
  // For GGUF blocks, each group's rows of x packed by block ([d / 32][rows][32]).
  std::vector<float> packed(kIsBlock<W> ? k * d : 0);
  if constexpr (kIsBlock<W>) {
    for (int64_t g = 0, r0 = 0; g < groups; ++g) {
      const int64_t rows = (k - r0) / (groups - g);
      float* group = packed.data() + r0 * d;
      for (int64_t b = 0; b < d / kBlockWeights; ++b)
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(group + (b * rows + r) * kBlockWeights, x + (r0 + r) * d + b * kBlockWeights,
                      sizeof(float) * kBlockWeights);
      r0 += rows;
    }
  }
  for (int64_t b0 = j0; b0 < j1; b0 += block) {
    const int64_t b1 = b0 + block < j1 ? b0 + block : j1;
    for (int64_t g = 0, r0 = 0; g < groups; ++g) {
      const int64_t rows = (k - r0) / (groups - g);  // balanced groups
      const float* xg = kIsBlock<W> ? packed.data() + r0 * d : x + r0 * d;
      RowsFor<W>(rows)(xg, d, e, n, y + r0 * n, b0, b1, g == 0 ? prefetch_bytes : 0);
      r0 += rows;
    }
  }
}
