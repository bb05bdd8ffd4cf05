// y = x @ W.T with 8-bit activations and integer dot products, for W in GGUF's block
// formats repacked by rows (specsample/kernels/int8_layout.py says the layout,
// int8_blocks.py the arithmetic; its NumPy reference computes the same numbers bit for bit).
//
// Each row of x is quantized on its own, in blocks of 32 numbers: d = max |x| / 127,
// q = round-to-nearest-even(x / d) (as x * (1 / d)), int8; with the sums of each 16 q's.
// W is stored in groups of 16 rows (kGroupRows): for each block of 32 weights, 64-byte chunks
// hold 4 consecutive quantized weights of each of the 16 rows, so one vector of 16 (or 8)
// int32 lanes gathers the 16 (8) rows' dot products with 4 numbers of x broadcast: the
// multiply-adds of VNNI (vpdpbusd, unsigned weights x signed activations) or of AVX2
// (vpmaddubsw + vpmaddwd). A block's integer sum is exact; it is then scaled in float32
// once per block per (row of x, row of W): out = fma(float(isum), S_w * d_x, out) (+ the
// minimum term of Q4_1 and Q4_K), blocks in order. So every output number is computed the
// same way whatever the number of rows of x, the thread split and the instruction set
// (integer sums are exact, the float steps are the same): row-count invariant, and equal
// across AVX-512 VNNI, AVX-VNNI and AVX2.
//
// The weights' unpacking (nibbles, fifth and sixth bits, scales) is done once per block
// and group and reused for every row of x in a tile (up to kInt8TileRows rows).
#ifndef SPECSAMPLE_KERNELS_INT8_MATMUL_H_
#define SPECSAMPLE_KERNELS_INT8_MATMUL_H_

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "small_k_matmul.h"

namespace specsample {

constexpr int64_t kGroupRows = 16;   // rows of W interleaved in a group
constexpr int64_t kChunkBytes = 64;  // 4 bytes of each row of a group
constexpr int64_t kInt8TileRows = 8;  // rows of x sharing one unpacking of a block
constexpr int64_t kInt8ChunkRows = 64;  // rows of x every group passes over in turn

// The integer instruction sets (small_k.py: integer_instruction_set()).
enum class IntIsa : int { kNone = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3 };

// The k rows of x, quantized, block by block (so a tile of rows reads each block's numbers
// at constant offsets from one pointer): q int8 [nb][k][32], the scales dx [nb][k],
// dxs = dx * float(sum of the block's q) [nb][k], and s16 int32 [nb][k][2], the sums of each
// half's 16 q's (the integer sums' correction for weights stored with an offset).
struct Activations {
  int8_t* q;
  float* dx;
  float* dxs;
  int32_t* s16;
  int64_t k, d, nb;
};

// Scratch for Activations of k rows of d numbers: `words` int32 words, laid out by Into.
struct ActivationBuffer {
  static int64_t Words(int64_t k, int64_t d) { return k * d / 4 + 4 * k * (d / 32); }
  static Activations Into(int32_t* words, int64_t k, int64_t d) {
    const int64_t nb = d / 32;
    float* dx = reinterpret_cast<float*>(words + 2 * k * nb);
    float* dxs = dx + k * nb;
    return Activations{reinterpret_cast<int8_t*>(dxs + k * nb), dx, dxs, words, k, d, nb};
  }
};

// The packed formats: bytes per (group, block) where a block is 32 weights, or per (group,
// super-block of 256 weights) for the K-quants; the offset subtracted from the stored
// unsigned values (applied through the activations' sums); whether a minimum term follows.
//   Q8_0: 8 chunks (u8 = q + 128), d f16[16]                      544 bytes per block
//   Q4_0: 4 chunks of nibbles (low: weights 4c..4c+3, high: 16+4c..), d f16[16]   288
//   Q4_1: 4 chunks of nibbles, d f16[16], m f16[16]               320
//   Q5_0: 4 chunks of nibbles, 8 u64 masks of fifth bits (bit 4t + i of mask v: vector v,
//         row t, byte i), d f16[16]                                352
//   Q4_K: per sub-block j 4 chunks of nibbles (2048), d f16[16], dmin f16[16],
//         sc u8[8][16], m u8[8][16]                                 2368 per super-block
//   Q6_K: per sub-block j 4 chunks of nibbles + 2 chunks of high bit pairs (bits 2s, 2s + 1
//         of byte (t, i) of chunk p: vector 4p + s), d f16[16], sc int8[16][16]   3360
enum class Packed : int { kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ4_K, kQ6_K };

template <Packed P>
struct PackedLayout;
template <>
struct PackedLayout<Packed::kQ8_0> {
  static constexpr int64_t kWeights = 32, kBytes = 544, kOffset = 128;
  static constexpr bool kMin = false;
};
template <>
struct PackedLayout<Packed::kQ4_0> {
  static constexpr int64_t kWeights = 32, kBytes = 288, kOffset = 8;
  static constexpr bool kMin = false;
};
template <>
struct PackedLayout<Packed::kQ4_1> {
  static constexpr int64_t kWeights = 32, kBytes = 320, kOffset = 0;
  static constexpr bool kMin = true;
};
template <>
struct PackedLayout<Packed::kQ5_0> {
  static constexpr int64_t kWeights = 32, kBytes = 352, kOffset = 16;
  static constexpr bool kMin = false;
};
template <>
struct PackedLayout<Packed::kQ4_K> {
  static constexpr int64_t kWeights = 256, kBytes = 2368, kOffset = 0;
  static constexpr bool kMin = true;
};
template <>
struct PackedLayout<Packed::kQ6_K> {
  static constexpr int64_t kWeights = 256, kBytes = 3360, kOffset = 32;
  static constexpr bool kMin = false;
};

// ---------------------------------------------------------------------------------------
// Vectors of int32 lanes, one lane per row of W: AVX-512 (16 lanes, a whole group per
// vector) and AVX2 (8 lanes: a group is taken in two halves, `half` 0 and 1, each the
// corresponding 32 bytes of every 64-byte chunk).
#define SPECSAMPLE_INT_OP(isa) __attribute__((target(isa), always_inline)) static

struct Int512Vnni {
  static constexpr int kLanes = 16;
  using V = __m512i;
  using F = Lanes<16>;
#define OP SPECSAMPLE_INT_OP("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
  OP V Load(const uint8_t* chunk, int) { return _mm512_loadu_si512(chunk); }
  OP V Low(V v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
  OP V High(V v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F)); }
  OP V Set1(int32_t a) { return _mm512_set1_epi32(a); }
  // acc + per lane the sum of 4 products u8 (w) x s8 (four numbers of x, broadcast from
  // memory by the instruction itself: GCC does not fold the broadcast into vpdpbusd).
  OP V Dot(V acc, V w, const int8_t* x4) {
    asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x4)));
    return acc;
  }
  static constexpr bool kSignedQ8 = false;  // Q8_0 goes through Dot (with the offset 128)
  static constexpr bool kPairSums = false;  // the multiply-adds sum into int32 directly
  OP V DotSigned(V acc, V w, const int8_t* x4) { return Dot(acc, w, x4); }
  // Adds 16 to the bytes whose bit is set in `bits` (bit 4t + i: byte i of row t).
  OP V AddSixteen(V v, uint64_t bits, int) {
    return _mm512_mask_add_epi8(v, static_cast<__mmask64>(bits), v, _mm512_set1_epi8(16));
  }
  // (bits 2s, 2s + 1 of each byte) << 4.
  OP V HighPair(V v, int s) {
    const V m = _mm512_set1_epi8(0x30);
    switch (s) {
      case 0: return _mm512_and_si512(_mm512_slli_epi16(v, 4), m);
      case 1: return _mm512_and_si512(_mm512_slli_epi16(v, 2), m);
      case 2: return _mm512_and_si512(v, m);
      default: return _mm512_and_si512(_mm512_srli_epi16(v, 2), m);
    }
  }
  OP V Or(V a, V b) { return _mm512_or_si512(a, b); }
  OP V Add(V a, V b) { return _mm512_add_epi32(a, b); }
  OP V MulLo(V a, V b) { return _mm512_mullo_epi32(a, b); }
  OP typename F::V ToFloat(V v) { return _mm512_cvtepi32_ps(v); }
  // 16 float16 numbers (this half's) as float32.
  OP typename F::V Halves(const uint8_t* p, int) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  OP typename F::V Bytes(const uint8_t* p, int) {  // 16 u8 as float32
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  OP V SignedBytes(const int8_t* p, int) {  // 16 int8 as int32
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // Quantizes 32 numbers: q = round(x * (1 / dx)), dx = max |x| / 127; the sums of q[0..15]
  // and q[16..31] in sums; returns dx.
  OP float QuantizeBlock(const float* x, int8_t* q, int32_t* sums) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512 a0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v0), magnitude));
    const __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v1), magnitude));
    // A NaN makes dx NaN, so every product of the row is NaN (max would drop it).
    const bool nan = (_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q)) != 0;
    const float dx = nan ? std::numeric_limits<float>::quiet_NaN()
                         : _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)) / 127.0f;
    const __m512 inverse = _mm512_set1_ps(dx != 0.0f ? 1.0f / dx : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inverse));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(q1));
    sums[0] = _mm512_reduce_add_epi32(q0);
    sums[1] = _mm512_reduce_add_epi32(q1);
    return dx;
  }
#undef OP
};

// The two AVX2-width integer sets share everything but the dot product.
struct Int256Base {
  static constexpr int kLanes = 8;
  using V = __m256i;
  using F = Lanes<8>;
#define OP SPECSAMPLE_INT_OP("avx2,fma,f16c")
  OP V Load(const uint8_t* chunk, int half) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * half));
  }
  OP V Low(V v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
  OP V High(V v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }
  OP V Set1(int32_t a) { return _mm256_set1_epi32(a); }
  OP V Broadcast4(const int8_t* x4) {
    int32_t word;
    std::memcpy(&word, x4, 4);
    return _mm256_set1_epi32(word);
  }
  OP V Bits(uint32_t bits) {  // byte i: 0xFF where bit i is set
    const V bytes = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                         3, 3, 3, 3, 3, 3, 3));
    const V select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, select), select);
  }
  OP V AddSixteen(V v, uint64_t bits, int half) {
    const V set = Bits(static_cast<uint32_t>(bits >> (32 * half)));
    return _mm256_add_epi8(v, _mm256_and_si256(set, _mm256_set1_epi8(16)));
  }
  OP V HighPair(V v, int s) {
    const V m = _mm256_set1_epi8(0x30);
    switch (s) {
      case 0: return _mm256_and_si256(_mm256_slli_epi16(v, 4), m);
      case 1: return _mm256_and_si256(_mm256_slli_epi16(v, 2), m);
      case 2: return _mm256_and_si256(v, m);
      default: return _mm256_and_si256(_mm256_srli_epi16(v, 2), m);
    }
  }
  OP V Or(V a, V b) { return _mm256_or_si256(a, b); }
  OP V Add(V a, V b) { return _mm256_add_epi32(a, b); }
  OP V MulLo(V a, V b) { return _mm256_mullo_epi32(a, b); }
  OP typename F::V ToFloat(V v) { return _mm256_cvtepi32_ps(v); }
  OP typename F::V Halves(const uint8_t* p, int half) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * half)));
  }
  OP typename F::V Bytes(const uint8_t* p, int half) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * half))));
  }
  OP V SignedBytes(const int8_t* p, int half) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * half)));
  }
  OP int32_t SumOf(V v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
  }
  // Quantizes 32 numbers as Int512Vnni::QuantizeBlock does (the same numbers).
  OP float QuantizeBlock(const float* x, int8_t* q, int32_t* sums) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    int nan = 0;
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v[i], magnitude));
      nan |= _mm256_movemask_ps(_mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
    }
    const float dx = nan ? std::numeric_limits<float>::quiet_NaN() : F::MaxOf(amax) / 127.0f;
    const __m256 inverse = _mm256_set1_ps(dx != 0.0f ? 1.0f / dx : 0.0f);
    V qi[4];
    for (int i = 0; i < 4; ++i) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inverse));
    // int32 -> int8 (values within -127..127): packs interleave 128-bit lanes, the
    // permutation puts the 4-byte groups back in order.
    const V packed = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                        _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    sums[0] = SumOf(_mm256_add_epi32(qi[0], qi[1]));
    sums[1] = SumOf(_mm256_add_epi32(qi[2], qi[3]));
    return dx;
  }
  // acc + per lane the sum of 4 products u8 x s8 by vpmaddubsw (pairs summed to int16,
  // saturating: exact for weights up to 63 against |x| <= 127) + vpmaddwd (pairs of int16
  // summed to int32).
  OP V MaddDot(V acc, V w, V x) {
    const V pairs = _mm256_maddubs_epi16(w, x);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
#undef OP
};

struct Int256Vnni : Int256Base {
  // acc + per lane the sum of 4 products u8 (w) x s8 (four numbers of x, broadcast).
  SPECSAMPLE_INT_OP("avx2,fma,f16c,avxvnni") V Dot(V acc, V w, const int8_t* x4) {
    return _mm256_dpbusd_avx_epi32(acc, w, Broadcast4(x4));
  }
  static constexpr bool kSignedQ8 = false;
  static constexpr bool kPairSums = false;
  SPECSAMPLE_INT_OP("avx2,fma,f16c,avxvnni") V DotSigned(V acc, V w, const int8_t* x4) {
    return Dot(acc, w, x4);
  }
};

struct Int256Madd : Int256Base {
  SPECSAMPLE_INT_OP("avx2,fma,f16c") V Dot(V acc, V w, const int8_t* x4) {
    return MaddDot(acc, w, Broadcast4(x4));
  }
  // vpmaddubsw would saturate on Q8_0's unsigned values (up to 255): without VNNI, Q8_0
  // takes the signed product |w| x (x with w's sign), exact (|w| <= 128, |x| <= 127), and
  // needs no offset.
  static constexpr bool kSignedQ8 = true;
  SPECSAMPLE_INT_OP("avx2,fma,f16c") V DotSigned(V acc, V w, const int8_t* x4) {
    const V signed_w = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
    const V x = _mm256_sign_epi8(Broadcast4(x4), signed_w);
    return MaddDot(acc, _mm256_abs_epi8(signed_w), x);
  }
  // Pair sums (int16) of several chunks added before they are widened to int32: one
  // vpmaddwd per run of chunks instead of one per chunk. Exact while a run's sums fit in
  // int16 (BlockSum says how many chunks a format's weights allow).
  static constexpr bool kPairSums = true;
  SPECSAMPLE_INT_OP("avx2,fma,f16c") V Pairs(V w, const int8_t* x4) {
    return _mm256_maddubs_epi16(w, Broadcast4(x4));
  }
  SPECSAMPLE_INT_OP("avx2,fma,f16c") V AddPairs(V a, V b) { return _mm256_add_epi16(a, b); }
  SPECSAMPLE_INT_OP("avx2,fma,f16c") V Widen(V acc, V pairs) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  // Q8_0's stored u8 = q + 128 as the signed q, and |q| (made once per block, not per row).
  SPECSAMPLE_INT_OP("avx2,fma,f16c") V Signed(V w) {
    return _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  SPECSAMPLE_INT_OP("avx2,fma,f16c") V Magnitude(V signed_w) { return _mm256_abs_epi8(signed_w); }
  // acc + the sums of 4 products q x (|q| times x with q's sign, as DotSigned).
  SPECSAMPLE_INT_OP("avx2,fma,f16c") V DotSignedParts(V acc, V signed_w, V magnitude,
                                                      const int8_t* x4) {
    return MaddDot(acc, magnitude, _mm256_sign_epi8(Broadcast4(x4), signed_w));
  }
};
#undef SPECSAMPLE_INT_OP

namespace int512vnni {
using IV = Int512Vnni;
#define SPECSAMPLE_INT8 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#include "int8_matmul_simd.h"
#undef SPECSAMPLE_INT8
}  // namespace int512vnni

namespace intavxvnni {
using IV = Int256Vnni;
#define SPECSAMPLE_INT8 __attribute__((target("avx2,fma,f16c,avxvnni")))
#include "int8_matmul_simd.h"
#undef SPECSAMPLE_INT8
}  // namespace intavxvnni

namespace intavx2 {
using IV = Int256Madd;
#define SPECSAMPLE_INT8 __attribute__((target("avx2,fma,f16c")))
#include "int8_matmul_simd.h"
#undef SPECSAMPLE_INT8
}  // namespace intavx2

}  // namespace specsample

#endif  // SPECSAMPLE_KERNELS_INT8_MATMUL_H_
