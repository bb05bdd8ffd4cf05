// Cached attention for one instruction set. No include guard: attention.cc includes this
// file once per instruction set, inside namespace specsample::attention_<isa>, after defining
// there Vec (Lanes<L>) and the macro SPECSAMPLE_SIMD (the functions' target).
//
// For one query vector q [D] and the cache entries it may see, s in [0, end): scores
// t_s = (q . k_s) * scale (the dot product: D / L multiply-adds into one vector, then its
// lanes summed by a fixed tree), m = max t_s, p_s = exp(t_s - m) (Exp below), l = sum p_s
// (L lanes: the j-th seen entry into lane j % L, in order of s, then the lanes by a fixed
// tree), out = (sum_s p_s v_s) / l (in order of s). Masked entries are skipped. Nothing
// depends on the other queries of the call, on entries past `end`, or on where the seen
// entries lie, so a query's output is the same, bit for bit, alone or beside others, and
// for a tree's path as for the same tokens in a chain.

#include "exp_simd.h"  // Exp

// The dot products of the R queries q[r] [D] with the 4 rows k[0..3] [D] (D a multiple of
// L) into out[r * stride + 0..3], each by the same tree whatever the others are.
template <int R, typename T>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void Dot4(const float* const* q,
                                                               const T* const* k, int64_t d,
                                                               float* out, int64_t stride) {
  constexpr int L = Vec::kLanes;
  typename Vec::V a[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) a[r][j] = Vec::Zero();
  for (int64_t i = 0; i < d; i += L) {
    typename Vec::V kv[4];
    for (int j = 0; j < 4; ++j) kv[j] = Vec::Load(k[j] + i);
    for (int r = 0; r < R; ++r) {
      const typename Vec::V qv = Vec::Load(q[r] + i);
      for (int j = 0; j < 4; ++j) a[r][j] = Vec::MulAdd(qv, kv[j], a[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) Vec::Sum4(a[r][0], a[r][1], a[r][2], a[r][3], out + r * stride);
}

// Which of the lanes' entries allowed[0..] are seen (`lanes`: the entries that exist; no
// byte past them is read).
SPECSAMPLE_SIMD __attribute__((always_inline)) inline typename Vec::Mask Seen(
    const bool* allowed, int64_t left) {
  if (left >= Vec::kLanes) return Vec::NonZeroBytes(reinterpret_cast<const uint8_t*>(allowed));
  alignas(16) uint8_t bytes[Vec::kLanes] = {};
  for (int64_t i = 0; i < left; ++i) bytes[i] = allowed[i];
  return Vec::NonZeroBytes(bytes);
}

// How many cache entries ahead of the one being read are prefetched.
constexpr int64_t kPrefetchEntries = 8;

// Entries per tile: a tile's keys (then its values) are read from memory by the set's first
// group of heads and stay in the L1 cache for the others.
template <typename T>
SPECSAMPLE_SIMD inline int64_t TileEntries(int64_t d) {
  return std::max<int64_t>(4, 16384 / (static_cast<int64_t>(sizeof(T)) * d) / 4 * 4);
}

// Scores of R heads for the entries s0 <= s < s1 (s0, s1 multiples of 4; entries past `end`
// read the last entry again, their scores are dropped later): t[r * row + s] = q[r] . k_s,
// entry s at keys + s * stride.
template <int R, typename T>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void ScoreTile(
    const float* const* q, const T* keys, int64_t stride, int64_t s0, int64_t s1, int64_t end,
    int64_t d, bool prefetch, float* t, int64_t row) {
  for (int64_t s = s0; s < s1; s += 4) {
    const T* k[4];
    for (int j = 0; j < 4; ++j) k[j] = keys + std::min(s + j, end - 1) * stride;
    if (prefetch && s + kPrefetchEntries + 4 <= end) {  // read kPrefetchEntries later
      for (int j = 0; j < 4; ++j) {
        const char* ahead = reinterpret_cast<const char*>(k[j] + kPrefetchEntries * stride);
        for (int64_t line = 0; line < d * static_cast<int64_t>(sizeof(T)); line += 64)
          _mm_prefetch(ahead + line, _MM_HINT_T0);
      }
    }
    Dot4<R>(q, k, d, t + s, row);
  }
}

// The weighted values of R heads over the entries e0 <= e < e1, for the N vectors of each
// value from column `at` on: sums[r] = (e0 == 0 ? 0 : out[r]) + sum_e p_{r,e} v_e in order
// of e (p_{r,e} at p[r * row + e]; entry e at values + e * stride), stored to out[r]
// (divided by l_r = p[r * row + end] when e1 == end). Storing and reloading a float is exact, so each sum is the one a single
// pass over all entries would make. N is a constant so that the sums and the loaded
// vectors stay in registers (with a count known only at run time the compiler copied each
// entry's vectors through memory, a library call per entry).
template <int R, int N, typename T>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void WeightTile(
    const T* values, int64_t stride, int64_t e0, int64_t e1, int64_t end, bool prefetch,
    const float* p, int64_t row, float* const* out, int64_t at) {
  constexpr int L = Vec::kLanes;
  typename Vec::V acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < N; ++j)
      acc[r][j] = e0 == 0 ? Vec::Zero() : Vec::Load(out[r] + at + L * j);
  for (int64_t e = e0; e < e1; ++e) {
    if (prefetch && e + kPrefetchEntries < end) {
      const char* ahead = reinterpret_cast<const char*>(values + (e + kPrefetchEntries) * stride + at);
      for (int line = 0; line < N * L * static_cast<int>(sizeof(T)); line += 64)
        _mm_prefetch(ahead + line, _MM_HINT_T0);
    }
    const T* v = values + e * stride + at;
    typename Vec::V vv[N];
    for (int j = 0; j < N; ++j) vv[j] = Vec::Load(v + L * j);
    for (int r = 0; r < R; ++r) {
      const typename Vec::V pv = Vec::Broadcast(p[r * row + e]);
      for (int j = 0; j < N; ++j) acc[r][j] = Vec::MulAdd(pv, vv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (e1 == end) {
      const typename Vec::V l = Vec::Broadcast(p[r * row + end]);
      for (int j = 0; j < N; ++j) Vec::Store(out[r] + at + L * j, Vec::Div(acc[r][j], l));
    } else {
      for (int j = 0; j < N; ++j) Vec::Store(out[r] + at + L * j, acc[r][j]);
    }
  }
}

// WeightTile<R, N> for every N-vector part of a head's D columns (N = 4, then the rest).
template <int R, typename T>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void WeightTileColumns(
    const T* values, int64_t stride, int64_t e0, int64_t e1, int64_t end, int64_t d,
    bool prefetch, const float* p, int64_t row, float* const* out) {
  constexpr int L = Vec::kLanes;
  int64_t at = 0;
  for (; at + 4 * L <= d; at += 4 * L)
    WeightTile<R, 4>(values, stride, e0, e1, end, prefetch, p, row, out, at);
  switch ((d - at) / L) {
    case 3: return WeightTile<R, 3>(values, stride, e0, e1, end, prefetch, p, row, out, at);
    case 2: return WeightTile<R, 2>(values, stride, e0, e1, end, prefetch, p, row, out, at);
    case 1: return WeightTile<R, 1>(values, stride, e0, e1, end, prefetch, p, row, out, at);
    default: return;
  }
}

// Heads of one set processed together, in groups of up to kGroup (the sums of a group stay in
// registers; every group reads a tile's entries from L1 after the first).
constexpr int kGroup = Vec::kLanes == 16 ? 4 : 2;

// ScoreTile for every group of the set's n heads (the first group prefetching).
template <typename T>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void ScoreGroups(
    int64_t n, const float* const* q, const T* keys, int64_t stride, int64_t s0, int64_t s1,
    int64_t end, int64_t d, float* scores, int64_t row) {
  for (int64_t g = 0; g < n; g += kGroup) {
    const bool first = g == 0;
    float* t = scores + g * row;
    switch (std::min<int64_t>(kGroup, n - g)) {
      case 1: ScoreTile<1>(q + g, keys, stride, s0, s1, end, d, first, t, row); break;
      case 2: ScoreTile<2>(q + g, keys, stride, s0, s1, end, d, first, t, row); break;
      default:
        if constexpr (kGroup == 4) {
          if (n - g == 3) {
            ScoreTile<3>(q + g, keys, stride, s0, s1, end, d, first, t, row);
          } else {
            ScoreTile<4>(q + g, keys, stride, s0, s1, end, d, first, t, row);
          }
        }
        break;
    }
  }
}

// WeightTileColumns for every group of the set's n heads (the first group prefetching).
template <typename T>
SPECSAMPLE_SIMD __attribute__((always_inline)) inline void WeightGroups(
    int64_t n, const T* values, int64_t stride, int64_t e0, int64_t e1, int64_t end,
    int64_t d, const float* scores, int64_t row, float* const* out) {
  for (int64_t g = 0; g < n; g += kGroup) {
    const bool first = g == 0;
    const float* p = scores + g * row;
    switch (std::min<int64_t>(kGroup, n - g)) {
      case 1: WeightTileColumns<1>(values, stride, e0, e1, end, d, first, p, row, out + g); break;
      case 2: WeightTileColumns<2>(values, stride, e0, e1, end, d, first, p, row, out + g); break;
      default:
        if constexpr (kGroup == 4) {
          if (n - g == 3) {
            WeightTileColumns<3>(values, stride, e0, e1, end, d, first, p, row, out + g);
          } else {
            WeightTileColumns<4>(values, stride, e0, e1, end, d, first, p, row, out + g);
          }
        }
        break;
    }
  }
}

// The n query heads of a set sharing one cache head (the heads of one query, or of a row's
// several queries): out[r] [D] = softmax over head r's allowed entries s < ends[r] of
// (q[r] . k_s) * scale, times v_s. keys, values (float32, or bfloat16 widened as read):
// entry s at keys + s * stride; allowed[r][s]:
// whether head r sees entry s; scores: scratch of n * (max end + 4) floats. The cache is read
// from memory once per set, a tile at a time. Each head's numbers are those it would have
// alone: every sum runs over the head's own entries in the same order, whatever the set.
template <typename T>
SPECSAMPLE_SIMD inline void AttendHeadSet(int64_t n, const float* const* q, const T* keys,
                                          const T* values, int64_t stride,
                                          const bool* const* allowed, const int64_t* ends,
                                          int64_t d, float scale, float* scores,
                                          float* const* out) {
  constexpr int L = Vec::kLanes;
  int64_t end = 0;
  for (int64_t r = 0; r < n; ++r) end = std::max(end, ends[r]);
  const int64_t row = end + 4;  // scores of head r: scores + r * row
  // One group shares nothing: its entries are read once in a single tile.
  const int64_t tile = n <= kGroup ? (end + 3) / 4 * 4 : TileEntries<T>(d);
  // Scores, a tile of entries at a time, 4 entries per dot-product call.
  for (int64_t s0 = 0; s0 < end; s0 += tile) {
    const int64_t s1 = std::min(s0 + tile, (end + 3) / 4 * 4);
    ScoreGroups<T>(n, q, keys, stride, s0, s1, end, d, scores, row);
  }
  const float minus_infinity = -std::numeric_limits<float>::infinity();
  const typename Vec::V scale_v = Vec::Broadcast(scale);
  const typename Vec::V masked = Vec::Broadcast(minus_infinity);
  for (int64_t r = 0; r < n; ++r) {
    float* t = scores + r * row;
    const int64_t own = ends[r];
    // t_s = score * scale where allowed, -inf elsewhere; m = their maximum (exact in any order)
    typename Vec::V mv = masked;
    for (int64_t i = 0; i < own; i += L) {
      const typename Vec::Mask lanes = Vec::Tail(own - i);
      const typename Vec::V v = Vec::Select(Seen(allowed[r] + i, own - i),
                                            Vec::Mul(Vec::Load(t + i, lanes), scale_v), masked);
      Vec::Store(t + i, lanes, v);
      mv = Vec::Max(mv, Vec::Select(lanes, v, masked));
    }
    const typename Vec::V m = Vec::Broadcast(Vec::MaxOf(mv));
    // l: the seen entry of rank j (j-th seen, in order of s) into lane j % L, so that l
    // depends on the seen entries alone, not on where they lie (a tree's path is scattered
    // over its slots; the same tokens in a chain are contiguous). Where every entry before
    // `full` is seen, rank = s: those blocks are added as vectors, the rest lane by lane.
    const void* unseen = std::memchr(allowed[r], 0, static_cast<size_t>(own));
    const int64_t gap = unseen ? static_cast<const bool*>(unseen) - allowed[r] : own;
    const int64_t full = gap / L * L;
    // p_s = exp(t_s - m) in place (masked: exp(-inf) = 0).
    typename Vec::V l = Vec::Zero();
    for (int64_t i = 0; i < own; i += L) {
      const typename Vec::Mask lanes = Vec::Tail(own - i);
      const typename Vec::V p = Vec::Select(lanes, Exp(Vec::Sub(Vec::Load(t + i, lanes), m)), Vec::Zero());
      Vec::Store(t + i, lanes, p);
      if (i + L <= full) l = Vec::Add(l, p);
    }
    alignas(64) float lane_sums[L];
    Vec::Store(lane_sums, l);
    for (int64_t s = full, rank = full; s < own; ++s) {
      if (allowed[r][s]) lane_sums[rank++ % L] += t[s];
    }
    t[end] = Vec::Sum(Vec::Load(lane_sums));  // kept past the entries
    for (int64_t e = own; e < end; ++e) t[e] = 0.0f;  // past head r's end: p = 0
  }
  // out[r] = sum over head r's entries of p_s v_s / l, a tile of entries at a time. An
  // entry head r does not see has p = 0, and adding 0 * v (v finite) leaves the sum as it
  // was bit for bit (it is never -0: it starts at +0, and x + -x rounds to +0), so adding
  // it equals skipping it, as the head alone would.
  for (int64_t e0 = 0; e0 < end; e0 += tile) {
    WeightGroups<T>(n, values, stride, e0, std::min(e0 + tile, end), end, d, scores, row, out);
  }
}
