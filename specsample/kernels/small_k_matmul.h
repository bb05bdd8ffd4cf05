// y = x @ w for a few rows of x: the matrix products of decoding and verification on CPUs.
//
// x: float32 [k, d] (k <= kMaxRows), w: float32 or bfloat16 [d, n] (row-major, as Flax
// stores kernels), y: float32 [k, n]. The transposed product (y = x @ e.T, e [n, d]) also
// takes e in GGUF's Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K blocks (below), dequantized in
// registers. bfloat16 weights stay bfloat16 in memory (half the bytes to stream) and are widened to float32 in registers, which is exact; the sums are
// float32 either way, in the same order, so a bfloat16 product equals the float32 product
// of the same (widened) weights bit for bit. At small k each weight is used k times after it is loaded, so the
// product is as fast as the weights can be streamed from memory, if (1) the weights are read
// in the order they lie in memory, (2) loads are issued far enough ahead to hide memory
// latency, and (3) the k x L*C running sums (vectors of L floats) stay in registers while
// a strip of rows is consumed. General matrix libraries block for large k and reach a sixth
// to a third of their peak at k = 8 (docs/benchmarks.md); this kernel does the three things
// above and nothing else.
//
// Work is split over threads by rows of w (each thread streams a contiguous part of it);
// each thread sums into its own [k, n] buffer, added up at the end.
//
// Row-count invariance: each row of y is summed in an order that does not depend on how
// many rows x has (the split over threads depends only on d, n and the pool), so the rows
// of a k-row product equal the same rows multiplied alone, bit for bit. Decoding multiplies
// one row per sequence and verification gamma + 1: with this, a verified position's logits
// equal the ones a plain decoding step computes, as far as the products go.
//
// The kernels are written once, in small_k_matmul_simd.h, against vectors of L floats
// (Lanes<L> below), and compiled twice: in namespace avx512 (L = 16, 32 registers, target
// AVX-512F) and in namespace avx2 (L = 8, 16 registers, target AVX2 + FMA; both also use
// F16C's float16 conversion for GGUF blocks' scales), each with its
// own register blocking. Only the kernel functions carry those targets, so the library
// loads on any x86-64 CPU; small_k_matmul.cc picks one instruction set at run time.
#ifndef SPECSAMPLE_KERNELS_SMALL_K_MATMUL_H_
#define SPECSAMPLE_KERNELS_SMALL_K_MATMUL_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

namespace specsample {

constexpr int64_t kMaxRows = 64;  // rows of x the kernels take

// The transposed kernel with more than one row of x takes e in blocks of about this many
// bytes (a multiple of kEmbeddingBlockRows rows), which stay cached while each row of x
// takes the block in turn.
constexpr int64_t kEmbeddingBlockBytes = 64 << 10;
constexpr int64_t kEmbeddingBlockRows = 8;

// The instruction sets the kernels are compiled for (the numbers are small_k.py's too).
// kAvxVnni: the AVX2 kernels, and AVX-VNNI for the 8-bit-activation products
// (int8_matmul.h; kAvx512 takes AVX-512 VNNI for those where the CPU has it).
enum class Isa : int { kNone = 0, kAvx2 = 1, kAvx512 = 2, kAvxVnni = 3 };

// A bfloat16 number as XLA passes it: the upper 16 bits of a float32.
using Bf16 = uint16_t;

inline float Widen(float a) { return a; }
inline float Widen(Bf16 a) {
  const uint32_t bits = static_cast<uint32_t>(a) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// GGUF's block formats (ggml's block_q8_0, block_q4_0, block_q4_1): 32 weights of a row
// per block, a float16 scale d (and a float16 minimum m for Q4_1) and the quantized values.
// Weight i of a block is d * qs[i] (Q8_0, int8), d * (q_i - 8) (Q4_0) or d * q_i + m
// (Q4_1), where the 4-bit q_i are the low nibbles of qs[0..15] for i < 16 and their high
// nibbles for i >= 16. d * q is exact in float32 (11 x 4 or 8 significant bits), so the
// kernels' weights equal those of the gguf package's float32 dequantization bit for bit.
constexpr int64_t kBlockWeights = 32;
using Half = uint16_t;
struct BlockQ8_0 {
  Half d;
  int8_t qs[kBlockWeights];
};
struct BlockQ4_0 {
  Half d;
  uint8_t qs[kBlockWeights / 2];
};
struct BlockQ4_1 {
  Half d, m;
  uint8_t qs[kBlockWeights / 2];
};
// Q5_0 (what llama.cpp's K-quant files use for rows that are not multiples of 256): weight i
// is d * (q_i - 16), q_i the nibble of Q4_0's layout | bit i of qh (little-endian) << 4.
struct BlockQ5_0 {
  Half d;
  uint8_t qh[4];
  uint8_t qs[kBlockWeights / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
                  sizeof(BlockQ5_0) == 22,
              "GGUF blocks are packed");

// GGUF's K-quant super-blocks (ggml's block_q4_K, block_q6_K): 256 weights of a row each.
// Q4_K: 8 sub-blocks of 32 weights, each with a 6-bit scale and a 6-bit minimum packed in
// `scales` (gguf's Q4_K.get_scale_min); weight i of sub-block j is (d * sc_j) * q_i -
// dmin * m_j, q_i 4 bits, from 32-byte chunks of qs: low nibbles for even j, high for odd.
// Q6_K: 16 groups of 16 weights, each with an int8 scale; weight w is (d * sc_{w/16}) *
// (q_w - 32), q_w 6 bits: 4 in ql, 2 in qh. d * sc is exact in float32 (11 x 6 or 8 bits),
// d * sc * q_i exact for Q4_K and rounded once for Q6_K, as the gguf package computes it.
constexpr int64_t kSuperBlockWeights = 256;
struct BlockQ4_K {
  Half d, dmin;
  uint8_t scales[12];
  uint8_t qs[kSuperBlockWeights / 2];
};
struct BlockQ6_K {
  uint8_t ql[kSuperBlockWeights / 2];  // low 4 bits
  uint8_t qh[kSuperBlockWeights / 4];  // high 2 bits
  int8_t scales[kSuperBlockWeights / 16];
  Half d;
};
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210, "GGUF blocks are packed");

// Whether W is one of the block formats, and how many weights one W holds.
template <typename W>
constexpr bool kIsSuperBlock = std::is_same_v<W, BlockQ4_K> || std::is_same_v<W, BlockQ6_K>;
template <typename W>
constexpr bool kIsBlock = std::is_same_v<W, BlockQ8_0> || std::is_same_v<W, BlockQ4_0> ||
                          std::is_same_v<W, BlockQ4_1> || std::is_same_v<W, BlockQ5_0> ||
                          kIsSuperBlock<W>;
template <typename W>
constexpr int64_t kWeightsPer = kIsSuperBlock<W> ? kSuperBlockWeights
                                : kIsBlock<W>    ? kBlockWeights
                                                 : 1;

struct Tuning {
  int64_t strip_rows;      // rows of w consumed between loads/stores of the running sums
  int64_t prefetch_bytes;  // how far ahead on each row of w to prefetch
  int64_t chunk_columns;   // columns of y kept hot at a time ([k, chunk] floats in L2)
};

// ---------------------------------------------------------------------------------------
// Vectors of L floats: the operations the kernels use. `Mask` says which lanes a masked
// load or store touches (the first `left` ones, for the tail of a row); masked loads read
// zeros elsewhere and touch no memory there.
template <int L>
struct Lanes;

#define SPECSAMPLE_LANES_OP __attribute__((target("avx512f"), always_inline)) static
template <>
struct Lanes<16> {
  static constexpr int kLanes = 16;
  using V = __m512;
  using Mask = __mmask16;
  SPECSAMPLE_LANES_OP Mask Tail(int64_t left) {
    return left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
  }
  SPECSAMPLE_LANES_OP V Zero() { return _mm512_setzero_ps(); }
  SPECSAMPLE_LANES_OP V Broadcast(float a) { return _mm512_set1_ps(a); }
  SPECSAMPLE_LANES_OP V Load(const float* p) { return _mm512_loadu_ps(p); }
  SPECSAMPLE_LANES_OP V Load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  SPECSAMPLE_LANES_OP V Load(const Bf16* p) {  // 16 bfloat16 numbers widened to float32
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  SPECSAMPLE_LANES_OP V LoadInt8(const int8_t* p) {  // 16 int8 numbers as float32
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // The low (or, with high, the high) 4 bits of 16 bytes as float32 numbers 0..15.
  SPECSAMPLE_LANES_OP V LoadNibbles(const uint8_t* p, bool high) {
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    v = high ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, _mm512_set1_epi32(0xF));
    return _mm512_cvtepi32_ps(v);
  }
  // Q5_0's 16 values from weight `first` on: (the nibbles at p | bit first + l of qh << 4) - 16.
  SPECSAMPLE_LANES_OP V LoadFiveBits(const uint8_t* p, bool high, uint32_t qh, int first) {
    __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    lo = high ? _mm512_srli_epi32(lo, 4) : _mm512_and_si512(lo, _mm512_set1_epi32(0xF));
    const __m512i bit = _mm512_add_epi32(_mm512_set1_epi32(first),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i hi = _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(qh)), bit);
    hi = _mm512_slli_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), 4);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(lo, hi), _mm512_set1_epi32(16)));
  }
  // Q6_K's 16 values (ql's low or high nibble | bits shift..shift+1 of qh << 4) - 32.
  SPECSAMPLE_LANES_OP V LoadSixBits(const uint8_t* ql, bool high, const uint8_t* qh, int shift) {
    __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ql)));
    lo = high ? _mm512_srli_epi32(lo, 4) : _mm512_and_si512(lo, _mm512_set1_epi32(0xF));
    __m512i hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh)));
    hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(hi, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(3)), 4);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(lo, hi), _mm512_set1_epi32(32)));
  }
  SPECSAMPLE_LANES_OP void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  SPECSAMPLE_LANES_OP void Store(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  SPECSAMPLE_LANES_OP V Add(V a, V b) { return _mm512_add_ps(a, b); }
  SPECSAMPLE_LANES_OP V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  SPECSAMPLE_LANES_OP V MulAdd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  SPECSAMPLE_LANES_OP float Sum(V v) { return _mm512_reduce_add_ps(v); }
  SPECSAMPLE_LANES_OP V Max(V a, V b) { return _mm512_max_ps(a, b); }
  SPECSAMPLE_LANES_OP V AndNot(V a, V b) {  // ~a & b
    return _mm512_castsi512_ps(_mm512_andnot_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }
  SPECSAMPLE_LANES_OP float MaxOf(V v) { return _mm512_reduce_max_ps(v); }
  // The lanes rounded to the nearest integer (ties to even), stored as int32.
  SPECSAMPLE_LANES_OP void StoreRounded(int32_t* p, V v) { _mm512_storeu_si512(p, _mm512_cvtps_epi32(v)); }
  SPECSAMPLE_LANES_OP V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  SPECSAMPLE_LANES_OP V Div(V a, V b) { return _mm512_div_ps(a, b); }
  SPECSAMPLE_LANES_OP V Round(V v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in -126..127.
  SPECSAMPLE_LANES_OP V Pow2(V n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  SPECSAMPLE_LANES_OP Mask Less(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  SPECSAMPLE_LANES_OP bool AnyNan(V v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0; }
  // The first lane equal to b, or -1.
  SPECSAMPLE_LANES_OP int FirstEqual(V v, float b) {
    const unsigned equal = _mm512_cmp_ps_mask(v, _mm512_set1_ps(b), _CMP_EQ_OQ);
    return equal ? __builtin_ctz(equal) : -1;
  }
  SPECSAMPLE_LANES_OP Mask NonZeroBytes(const uint8_t* p) {  // lane i: p[i] != 0
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_test_epi32_mask(v, v);
  }
  SPECSAMPLE_LANES_OP V Select(Mask m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }
  // The sums of a, b, c, d's lanes, each by the same tree, into out[0..3].
  SPECSAMPLE_LANES_OP void Sum4(V a, V b, V c, V d, float* out) {
    const __m256 ha = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    const __m256 hb = _mm256_add_ps(_mm512_castps512_ps256(b), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(b), 1)));
    const __m256 hc = _mm256_add_ps(_mm512_castps512_ps256(c), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c), 1)));
    const __m256 hd = _mm256_add_ps(_mm512_castps512_ps256(d), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(ha, hb), _mm256_hadd_ps(hc, hd));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
};
#undef SPECSAMPLE_LANES_OP

#define SPECSAMPLE_LANES_OP __attribute__((target("avx2,fma"), always_inline)) static
template <>
struct Lanes<8> {
  static constexpr int kLanes = 8;
  using V = __m256;
  using Mask = __m256i;  // lane i: all ones (touched) or zero
  SPECSAMPLE_LANES_OP Mask Tail(int64_t left) {
    const int lanes = left >= 8 ? 8 : static_cast<int>(left);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  SPECSAMPLE_LANES_OP V Zero() { return _mm256_setzero_ps(); }
  SPECSAMPLE_LANES_OP V Broadcast(float a) { return _mm256_set1_ps(a); }
  SPECSAMPLE_LANES_OP V Load(const float* p) { return _mm256_loadu_ps(p); }
  SPECSAMPLE_LANES_OP V Load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  SPECSAMPLE_LANES_OP V Load(const Bf16* p) {  // 8 bfloat16 numbers widened to float32
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  SPECSAMPLE_LANES_OP V LoadInt8(const int8_t* p) {  // 8 int8 numbers as float32
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // The low (or, with high, the high) 4 bits of 8 bytes as float32 numbers 0..15.
  SPECSAMPLE_LANES_OP V LoadNibbles(const uint8_t* p, bool high) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    v = high ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, _mm256_set1_epi32(0xF));
    return _mm256_cvtepi32_ps(v);
  }
  // Q5_0's 8 values from weight `first` on: (the nibbles at p | bit first + l of qh << 4) - 16.
  SPECSAMPLE_LANES_OP V LoadFiveBits(const uint8_t* p, bool high, uint32_t qh, int first) {
    __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    lo = high ? _mm256_srli_epi32(lo, 4) : _mm256_and_si256(lo, _mm256_set1_epi32(0xF));
    const __m256i bit =
        _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(qh)), bit);
    hi = _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), 4);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(16)));
  }
  // Q6_K's 8 values (ql's low or high nibble | bits shift..shift+1 of qh << 4) - 32.
  SPECSAMPLE_LANES_OP V LoadSixBits(const uint8_t* ql, bool high, const uint8_t* qh, int shift) {
    __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql)));
    lo = high ? _mm256_srli_epi32(lo, 4) : _mm256_and_si256(lo, _mm256_set1_epi32(0xF));
    __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qh)));
    hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(hi, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(3)), 4);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(32)));
  }
  SPECSAMPLE_LANES_OP void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  SPECSAMPLE_LANES_OP void Store(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  SPECSAMPLE_LANES_OP V Add(V a, V b) { return _mm256_add_ps(a, b); }
  SPECSAMPLE_LANES_OP V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  SPECSAMPLE_LANES_OP V MulAdd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  SPECSAMPLE_LANES_OP float Sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  SPECSAMPLE_LANES_OP V Max(V a, V b) { return _mm256_max_ps(a, b); }
  SPECSAMPLE_LANES_OP V AndNot(V a, V b) { return _mm256_andnot_ps(a, b); }  // ~a & b
  SPECSAMPLE_LANES_OP float MaxOf(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  SPECSAMPLE_LANES_OP void StoreRounded(int32_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_cvtps_epi32(v));
  }
  SPECSAMPLE_LANES_OP V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  SPECSAMPLE_LANES_OP V Div(V a, V b) { return _mm256_div_ps(a, b); }
  SPECSAMPLE_LANES_OP V Round(V v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  SPECSAMPLE_LANES_OP V Pow2(V n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  SPECSAMPLE_LANES_OP Mask Less(V a, V b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  SPECSAMPLE_LANES_OP bool AnyNan(V v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0; }
  SPECSAMPLE_LANES_OP int FirstEqual(V v, float b) {
    const unsigned equal = _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(b), _CMP_EQ_OQ));
    return equal ? __builtin_ctz(equal) : -1;
  }
  SPECSAMPLE_LANES_OP Mask NonZeroBytes(const uint8_t* p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_xor_si256(_mm256_cmpeq_epi32(v, _mm256_setzero_si256()), _mm256_set1_epi32(-1));
  }
  SPECSAMPLE_LANES_OP V Select(Mask m, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m)); }
  SPECSAMPLE_LANES_OP void Sum4(V a, V b, V c, V d, float* out) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
};
#undef SPECSAMPLE_LANES_OP

// ---------------------------------------------------------------------------------------
// The kernels for each instruction set: what differs is the vector width (Vec), how many
// rows of x share a strip of w (kRowsPerStripGroup), how many vectors of sums each row
// keeps in registers (VectorsPerRow), the tiles of the transposed kernel (kTileRows,
// TileColumns) and the tuning; small_k_matmul_simd.h has the code, which
// defines PartialProduct and EmbeddingProduct in each namespace.
namespace avx512 {

using Vec = Lanes<16>;

// Rows per group in PartialProduct: up to 9 rows keep 3 vectors of sums per row (27
// registers); 10-16 rows would keep 1-2, and re-reading a strip of w from L1 for a second
// group costs less than that (measured: 16 rows as 2 x 8 are up to 1.7x faster).
constexpr int64_t kRowsPerStripGroup = 9;

// Running sums: R rows x C vectors of 16 floats. Registers needed: R*C + C + 1 <= 32.
template <int R>
constexpr int VectorsPerRow() {
  static_assert(R >= 1 && R <= kRowsPerStripGroup, "more rows go in groups");
  return R <= 2 ? 8 : R <= 3 ? 6 : R <= 5 ? 4 : 3;
}

// Tiles of the transposed kernel: R rows of x by TileColumns<R>() rows of e, one vector of
// sums per pair. Registers needed: R * J + R + 1 <= 32.
constexpr int64_t kTileRows = 4;
template <int R>
constexpr int TileColumns() {
  static_assert(R >= 1 && R <= kTileRows, "more rows go in groups");
  return R <= 2 ? 8 : R <= 3 ? 7 : 6;
}

// Tiles of the transposed kernel on GGUF blocks: R rows of x (read from L1) by
// BlockTileColumns<R>() rows of e. Each dequantized vector serves R rows (dequantizing
// costs more than a multiply-add), and R * J >= 8 sums are in flight to cover the
// multiply-add latency; the sums and the block's constants stay within the registers.
constexpr int64_t kBlockTileRows = 8;
template <int R>
constexpr int BlockTileColumns() {
  static_assert(R >= 1 && R <= kBlockTileRows, "more rows go in groups");
  return R <= 1 ? 8 : R <= 2 ? 4 : R <= 3 ? 3 : 2;
}

inline Tuning DefaultTuning(int64_t k, int64_t n) {
  // Measured on AMD Zen 4 (2 cores) with [k, 2048] x [2048, 8192]: one row wants short
  // strips and a long prefetch (pure streaming); more rows want long strips so the sums'
  // loads and stores vanish next to the multiply-adds. The [k, chunk] sums stay <= 256 KiB.
  // Three rows take short strips only where the rows of w are long (n > 1024): on an Intel
  // AVX-512 machine SmolLM2's [576, 576] took 0.108-0.110 ms at k = 3 with short strips,
  // 1.3x its k = 4 time with long ones, and 0.078 ms at k = 3 with long strips.
  if (k <= 2 || (k == 3 && n > 1024)) return {8, 1024, 4096};
  const int64_t chunk = k <= 16 ? 4096 : (65536 / k) / 16 * 16;
  return {64, 512, chunk};
}

#define SPECSAMPLE_SIMD __attribute__((target("avx512f,avx2,fma,f16c")))
#include "small_k_matmul_simd.h"
#undef SPECSAMPLE_SIMD

}  // namespace avx512

namespace avx2 {

using Vec = Lanes<8>;

// Rows per group in PartialProduct: with 16 registers, up to 4 rows keep 3 vectors of sums
// (12 registers + 3 for w + 1 broadcast), 5-6 rows keep 2; more rows would keep one, and
// then another pass over the strip of w in L1 costs less (measured on Zen 3: 9 rows as
// 4 + 5 are 1.2x faster than 3 x 3, 16 as 5 + 5 + 6 level with 4 x 4, 1.3x faster than
// 2 x 8).
constexpr int64_t kRowsPerStripGroup = 6;

// Running sums: R rows x C vectors of 8 floats. Registers needed: R*C + C + 1 <= 16.
template <int R>
constexpr int VectorsPerRow() {
  static_assert(R >= 1 && R <= kRowsPerStripGroup, "more rows go in groups");
  return R <= 1 ? 7 : R <= 2 ? 5 : R <= 4 ? 3 : 2;
}

// Tiles of the transposed kernel: R rows of x by TileColumns<R>() rows of e, one vector of
// sums per pair. Registers needed: R * J + R + 1 <= 16.
constexpr int64_t kTileRows = 3;
template <int R>
constexpr int TileColumns() {
  static_assert(R >= 1 && R <= kTileRows, "more rows go in groups");
  return R <= 1 ? 8 : R <= 2 ? 5 : 4;
}

// Tiles of the transposed kernel on GGUF blocks (as in namespace avx512): R * J sums and
// the block's constants within 16 registers.
constexpr int64_t kBlockTileRows = 8;
template <int R>
constexpr int BlockTileColumns() {
  static_assert(R >= 1 && R <= kBlockTileRows, "more rows go in groups");
  return R <= 1 ? 8 : R <= 2 ? 4 : R <= 3 ? 3 : R <= 5 ? 2 : 1;
}

inline Tuning DefaultTuning(int64_t k, int64_t n) {
  // Measured on AMD Zen 3 (2 cores, AVX2) with SmolLM2's [576, 1536], [1536, 576] and
  // [576, 49152]: a 256-byte prefetch for every k; strips of 16 rows of w from 4 rows of x,
  // and for 1-3 rows also where the rows of w are short (n <= 1024), else 8 (1.2-1.3x
  // faster there); strips of 64 rows (64 rows of w, on as many pages, in flight at once)
  // are 1.2-1.7x slower here.
  const int64_t chunk = k <= 16 ? 4096 : (65536 / k) / 16 * 16;
  return {k <= 3 && n > 1024 ? 8 : 16, 256, chunk};
}

#define SPECSAMPLE_SIMD __attribute__((target("avx2,fma,f16c")))
#include "small_k_matmul_simd.h"
#undef SPECSAMPLE_SIMD

}  // namespace avx2

}  // namespace specsample

#endif  // SPECSAMPLE_KERNELS_SMALL_K_MATMUL_H_
