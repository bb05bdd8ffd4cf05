// The 8-bit-activation kernels for one integer instruction set. No include guard:
// int8_matmul.h includes this file once per set, inside namespace specsample::<set>, after
// defining there IV (the integer vectors, one lane per row of W, with IV::F the float
// vectors of the same width) and the macro SPECSAMPLE_INT8 (the functions' target).

using FV = typename IV::F;
using IVec = typename IV::V;
using FVec = typename FV::V;
constexpr int kIntLanes = IV::kLanes;
constexpr int kHalves = kGroupRows / kIntLanes;  // passes over a group: 1 (AVX-512) or 2

// Quantizes rows x [k, d] (row stride ldx; d a multiple of 32) into `a`, each row and block
// on its own: rows r0 .. r1 - 1 of them (r1 < 0: to the last), so that threads may share them.
SPECSAMPLE_INT8 inline void QuantizeRows(const float* x, int64_t ldx, const Activations& a,
                                         int64_t r0 = 0, int64_t r1 = -1) {
  for (int64_t r = r0; r < (r1 < 0 ? a.k : r1); ++r) {
    for (int64_t b = 0; b < a.nb; ++b) {
      const int64_t at = b * a.k + r;  // block-major
      int32_t* sums = a.s16 + 2 * at;
      const float dx = IV::QuantizeBlock(x + r * ldx + 32 * b, a.q + 32 * at, sums);
      a.dx[at] = dx;
      a.dxs[at] = dx * static_cast<float>(sums[0] + sums[1]);
    }
  }
}

// Quantizes rows x [k, d] in two passes into `a` of 2k rows: row r < k holds x's blocks
// quantized as QuantizeRows does (dx, q), row k + r the first pass's rounding error
// e = fma(-q, dx, x) quantized the same way (dx', q'), so x = dx q + dx' q' to within
// max|e| / 254 per block, about 1/250 of one pass's error. A product of `a`'s 2k rows then
// gives each row's two partial products, which the caller adds (first + second). Rows
// r0 .. r1 - 1 of x (r1 < 0: to the last).
SPECSAMPLE_INT8 inline void QuantizeRowsWithError(const float* x, int64_t ldx, const Activations& a,
                                                  int64_t r0 = 0, int64_t r1 = -1) {
  const int64_t k = a.k / 2;
  for (int64_t r = r0; r < (r1 < 0 ? k : r1); ++r) {
    for (int64_t b = 0; b < a.nb; ++b) {
      const float* block = x + r * ldx + 32 * b;
      const int64_t at = b * a.k + r, error_at = at + k;  // block-major
      int32_t* sums = a.s16 + 2 * at;
      const float dx = IV::QuantizeBlock(block, a.q + 32 * at, sums);
      a.dx[at] = dx;
      a.dxs[at] = dx * static_cast<float>(sums[0] + sums[1]);
      alignas(64) float error[32];
      const int8_t* q = a.q + 32 * at;
      for (int i = 0; i < 32; ++i) error[i] = std::fma(-static_cast<float>(q[i]), dx, block[i]);
      int32_t* error_sums = a.s16 + 2 * error_at;
      const float de = IV::QuantizeBlock(error, a.q + 32 * error_at, error_sums);
      a.dx[error_at] = de;
      a.dxs[error_at] = de * static_cast<float>(error_sums[0] + error_sums[1]);
    }
  }
}

// The offset the activations' sums correct for (Q8_0 without VNNI multiplies signed values
// and needs none).
template <Packed P>
constexpr int64_t CorrectionOffset() {
  return P == Packed::kQ8_0 && IV::kSignedQ8 ? 0 : PackedLayout<P>::kOffset;
}

// One block of a group, unpacked for this half: u[v] the unsigned values of vector v (v < 4:
// weights 4v..4v+3 of each row; v >= 4: weights 16 + 4(v - 4)..), the float scale S and
// minimum M of each row (lane), and for Q6_K the integer scales of the block's two groups of
// 16 weights.
template <Packed P>
struct Unpacked {
  IVec u[8];
  IVec magnitude[8];  // Q8_0 taken signed (IV::kSignedQ8): u holds q, magnitude |q|
  FVec scale, minimum;
  IVec scale_a, scale_b;  // Q6_K
};

// (I = IV: a dependent name, so that a set without the pair-sum helpers compiles the
// branches it does not take.)
template <Packed P, typename I = IV>
SPECSAMPLE_INT8 __attribute__((always_inline)) inline void Unpack(const uint8_t* group,
                                                                   int64_t b, int half,
                                                                   Unpacked<P>& out) {
  using Layout = PackedLayout<P>;
  if constexpr (P == Packed::kQ8_0) {
    const uint8_t* blk = group + b * Layout::kBytes;
    for (int c = 0; c < 8; ++c) out.u[c] = IV::Load(blk + kChunkBytes * c, half);
    if constexpr (I::kSignedQ8 && I::kPairSums) {
      for (int c = 0; c < 8; ++c) {
        out.u[c] = I::Signed(out.u[c]);
        out.magnitude[c] = I::Magnitude(out.u[c]);
      }
    }
    out.scale = IV::Halves(blk + 512, half);
  } else if constexpr (P == Packed::kQ4_0 || P == Packed::kQ4_1 || P == Packed::kQ5_0) {
    const uint8_t* blk = group + b * Layout::kBytes;
    for (int c = 0; c < 4; ++c) {
      const IVec v = IV::Load(blk + kChunkBytes * c, half);
      out.u[c] = IV::Low(v);
      out.u[4 + c] = IV::High(v);
    }
    if constexpr (P == Packed::kQ5_0) {
      for (int v = 0; v < 8; ++v) {
        uint64_t bits;
        std::memcpy(&bits, blk + 256 + 8 * v, 8);
        out.u[v] = IV::AddSixteen(out.u[v], bits, half);
      }
      out.scale = IV::Halves(blk + 320, half);
    } else {
      out.scale = IV::Halves(blk + 256, half);
      if constexpr (P == Packed::kQ4_1) out.minimum = IV::Halves(blk + 288, half);
    }
  } else if constexpr (P == Packed::kQ4_K) {
    const uint8_t* base = group + (b / 8) * Layout::kBytes;
    const int j = static_cast<int>(b % 8);
    for (int c = 0; c < 4; ++c) {
      const IVec v = IV::Load(base + 256 * j + kChunkBytes * c, half);
      out.u[c] = IV::Low(v);
      out.u[4 + c] = IV::High(v);
    }
    // d * sc and dmin * m are exact in float32 (11 x 6 significant bits).
    out.scale = FV::Mul(IV::Halves(base + 2048, half), IV::Bytes(base + 2112 + 16 * j, half));
    out.minimum = FV::Mul(FV::Broadcast(-1.0f),
                          FV::Mul(IV::Halves(base + 2080, half), IV::Bytes(base + 2240 + 16 * j, half)));
  } else {  // Q6_K
    const uint8_t* base = group + (b / 8) * Layout::kBytes;
    const int j = static_cast<int>(b % 8);
    const uint8_t* sub = base + 384 * j;
    for (int c = 0; c < 4; ++c) {
      const IVec v = IV::Load(sub + kChunkBytes * c, half);
      out.u[c] = IV::Low(v);
      out.u[4 + c] = IV::High(v);
    }
    for (int p = 0; p < 2; ++p) {
      const IVec high = IV::Load(sub + 256 + kChunkBytes * p, half);
      for (int s = 0; s < 4; ++s) out.u[4 * p + s] = IV::Or(out.u[4 * p + s], IV::HighPair(high, s));
    }
    out.scale = IV::Halves(base + 3072, half);
    const int8_t* sc = reinterpret_cast<const int8_t*>(base + 3104);
    out.scale_a = IV::SignedBytes(sc + 16 * (2 * j), half);
    out.scale_b = IV::SignedBytes(sc + 16 * (2 * j + 1), half);
  }
}

// How many chunks' pair sums (int16: two products u8 x s8, |x| <= 127) may be added before
// they are widened: a run's sum must stay within int16 (32767). 4-bit weights (<= 15): a
// pair <= 3810, all 8 chunks; Q5_0 (<= 31): 7874, 4; Q6_K (<= 63): 16002, 2.
template <Packed P>
constexpr int PairRun() {
  return P == Packed::kQ5_0 ? 4 : P == Packed::kQ6_K ? 2 : 8;
}

// The int16 pair sums of chunks first .. first + count - 1 (chunk c: weights 4c..4c+3 of
// each row, against x's numbers xq[4c..4c+3]).
template <Packed P, typename I>
SPECSAMPLE_INT8 __attribute__((always_inline)) inline IVec PairsOf(const Unpacked<P>& w,
                                                                  const int8_t* xq, int first,
                                                                  int count) {
  IVec pairs = I::Pairs(w.u[first], xq + 4 * first);
  for (int c = first + 1; c < first + count; ++c) {
    pairs = I::AddPairs(pairs, I::Pairs(w.u[c], xq + 4 * c));
  }
  return pairs;
}

// The block's integer sums of one row of x (xq: its 32 quantized numbers, s16 the sums of
// its halves) against every lane's row of W. Two accumulators (weights 0..15, 16..31)
// halve the chain of dependent multiply-adds; integer sums are exact in any order, so
// every way of adding them below gives the same numbers.
template <Packed P, typename I = IV>
SPECSAMPLE_INT8 __attribute__((always_inline)) inline IVec BlockSum(const Unpacked<P>& w,
                                                                   const int8_t* xq,
                                                                   const int32_t* s16) {
  constexpr int32_t kOffset = static_cast<int32_t>(CorrectionOffset<P>());
  IVec a = IV::Set1(-kOffset * s16[0]);
  IVec b = IV::Set1(-kOffset * s16[1]);
  if constexpr (I::kPairSums && P == Packed::kQ8_0) {  // signed, |q| made per block
    for (int c = 0; c < 4; ++c) {
      a = I::DotSignedParts(a, w.u[c], w.magnitude[c], xq + 4 * c);
      b = I::DotSignedParts(b, w.u[4 + c], w.magnitude[4 + c], xq + 16 + 4 * c);
    }
    return I::Add(a, b);
  } else if constexpr (I::kPairSums) {
    constexpr int kRun = PairRun<P>();
    if constexpr (kRun == 8) {  // both halves' chunks in one run
      return I::Widen(I::Add(a, b), PairsOf<P, I>(w, xq, 0, 8));
    } else {
      for (int c0 = 0; c0 < 4; c0 += kRun) {
        a = I::Widen(a, PairsOf<P, I>(w, xq, c0, kRun));
        b = I::Widen(b, PairsOf<P, I>(w, xq, 4 + c0, kRun));
      }
      if constexpr (P == Packed::kQ6_K) {  // each group of 16 times its int8 scale
        return I::Add(I::MulLo(a, w.scale_a), I::MulLo(b, w.scale_b));
      } else {
        return I::Add(a, b);
      }
    }
  } else {
    for (int c = 0; c < 4; ++c) {
      if constexpr (P == Packed::kQ8_0) {
        a = IV::DotSigned(a, w.u[c], xq + 4 * c);
        b = IV::DotSigned(b, w.u[4 + c], xq + 16 + 4 * c);
      } else {
        a = IV::Dot(a, w.u[c], xq + 4 * c);
        b = IV::Dot(b, w.u[4 + c], xq + 16 + 4 * c);
      }
    }
    if constexpr (P == Packed::kQ6_K) {  // each group of 16 times its int8 scale
      return IV::Add(IV::MulLo(a, w.scale_a), IV::MulLo(b, w.scale_b));
    } else {
      return IV::Add(a, b);
    }
  }
}

// Bytes ahead of the block being read that are prefetched (the next blocks of the group's
// stream, and then the next group's).
constexpr int64_t kInt8PrefetchBytes = 1536;

// y[r0 + r, lanes of this half of the group] for R rows of x: every block of the row, in
// order, unpacked once for the R rows. `valid`: how many of the half's lanes are real rows
// of W (the last group may be partial).
template <Packed P, int R>
SPECSAMPLE_INT8 void GroupTile(const uint8_t* group, const Activations& a, int64_t r0, int half,
                               float* y, int64_t ldy, int valid) {
  using Layout = PackedLayout<P>;
  // Every loop over the R rows is unrolled before the compiler decides where `out` lives:
  // left to its own size limits, GCC kept out[] in memory (zeroed by a `rep stos` on each
  // call, stored back every block) although AVX-512's 32 registers hold it (a prefill's
  // products were 6% slower: docs/benchmarks.md, "A prefill's rows").
  FVec out[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) out[r] = FV::Zero();
  const int8_t* xq = a.q + 32 * r0;
  const float* dx = a.dx + r0;
  const float* dxs = a.dxs + r0;
  const int32_t* s16 = a.s16 + 2 * r0;
  constexpr int64_t kBlocksPerUnit = Layout::kWeights / 32;
  for (int64_t b = 0; b < a.nb; ++b) {
    if (half == 0 && b % kBlocksPerUnit == 0) {
      const char* next = reinterpret_cast<const char*>(group + (b / kBlocksPerUnit) * Layout::kBytes);
      for (int64_t line = 0; line < Layout::kBytes / kBlocksPerUnit; line += 64)
        _mm_prefetch(next + kInt8PrefetchBytes + line, _MM_HINT_T0);
    }
    Unpacked<P> w;
    Unpack<P>(group, b, half, w);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const IVec sum = BlockSum<P>(w, xq + 32 * r, s16 + 2 * r);
      const FVec scale = FV::Mul(w.scale, FV::Broadcast(dx[r]));
      out[r] = FV::MulAdd(IV::ToFloat(sum), scale, out[r]);
      if constexpr (Layout::kMin) out[r] = FV::MulAdd(w.minimum, FV::Broadcast(dxs[r]), out[r]);
    }
    xq += 32 * a.k;
    dx += a.k;
    dxs += a.k;
    s16 += 2 * a.k;
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    if (valid >= kIntLanes) {
      FV::Store(y + r * ldy, out[r]);
    } else {
      FV::Store(y + r * ldy, FV::Tail(valid), out[r]);
    }
  }
}

template <Packed P>
using TileFn = void (*)(const uint8_t*, const Activations&, int64_t, int, float*, int64_t, int);

template <Packed P, int... R>
inline TileFn<P> TileFor(int64_t rows, std::integer_sequence<int, R...>) {
  static constexpr TileFn<P> kTable[] = {nullptr, GroupTile<P, R + 1>...};
  return kTable[rows];
}

// One thread's share: y[k, 16 g0 .. min(16 g1, n)] for the groups g0..g1 of W (bytes per
// group: group_bytes). The rows of x go in chunks of <= kInt8ChunkRows, each passed over by
// every group of the share while its numbers stay in the caches (a prefill's rows, read once
// per group, would stream from memory), and within a chunk in balanced tiles of
// <= kInt8TileRows; each tile reads the group again (from the caches). Each row's numbers
// do not depend on its chunk or tile.
template <Packed P>
inline void Int8Product(const Activations& a, const uint8_t* w, int64_t group_bytes, int64_t n,
                        float* y, int64_t g0, int64_t g1) {
  for (int64_t c0 = 0; c0 < a.k; c0 += kInt8ChunkRows) {
    const int64_t c1 = c0 + kInt8ChunkRows < a.k ? c0 + kInt8ChunkRows : a.k;
    const int64_t tiles = (c1 - c0 + kInt8TileRows - 1) / kInt8TileRows;
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* group = w + g * group_bytes;
      for (int half = 0; half < kHalves; ++half) {
        const int64_t first = g * kGroupRows + half * kIntLanes;  // the first lane's row of W
        if (first >= n) break;
        const int valid = static_cast<int>(n - first < kIntLanes ? n - first : kIntLanes);
        for (int64_t t = 0, r0 = c0; t < tiles; ++t) {
          const int64_t rows = (c1 - r0) / (tiles - t);
          TileFor<P>(rows, std::make_integer_sequence<int, kInt8TileRows>())(
              group, a, r0, half, y + r0 * n + first, n, valid);
          r0 += rows;
        }
      }
    }
  }
}

// A product of quantized rows with one packed matrix of any format (Int8Product<P>).
using ProductFn = void (*)(const Activations&, const uint8_t*, int64_t, int64_t, float*, int64_t,
                           int64_t);
inline ProductFn ProductFor(Packed p) {
  switch (p) {
    case Packed::kQ8_0: return Int8Product<Packed::kQ8_0>;
    case Packed::kQ4_0: return Int8Product<Packed::kQ4_0>;
    case Packed::kQ4_1: return Int8Product<Packed::kQ4_1>;
    case Packed::kQ5_0: return Int8Product<Packed::kQ5_0>;
    case Packed::kQ4_K: return Int8Product<Packed::kQ4_K>;
    default: return Int8Product<Packed::kQ6_K>;
  }
}
