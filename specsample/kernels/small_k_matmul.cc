// XLA FFI handlers for the small-k products of small_k_matmul.h (CPU, AVX-512 or AVX2 + FMA),
// called from specsample/kernels/small_k.py as custom calls:
//   "specsample_small_k_matmul":            x f32 [k, d], w f32 [d, n] -> y f32 [k, n]
//   "specsample_small_k_matmul_transposed": x f32 [k, d], e f32 [n, d] -> y f32 [k, n]
// and the same with bfloat16 weights ("..._bf16": w bf16 [d, n], e bf16 [n, d]), and the
// transposed product with e in GGUF blocks ("..._q8_0", "..._q4_0", "..._q4_1", "..._q5_0": u8 [n,
// d / 32 * block bytes]; "..._q4_k", "..._q6_k": u8 [n, d / 256 * block bytes]),
// with 1 <= k <= kMaxRows, the work split over XLA's intra-op thread pool, and the kernels
// of one instruction set: the best this CPU has, or the one small_k.py asks for
// (SpecsampleSmallKMatmulUseIsa, from the environment variable SPECSAMPLE_SMALL_K_ISA).
// The products with 8-bit activations (int8_matmul.h; specsample/kernels/int8_blocks.py):
//   "specsample_int8_matmul_<format>":  x f32 [k, d], packed u8 -> y f32 [k, n]
//   "specsample_int8_greedy_<format>":  x f32 [k, d], packed u8 -> each row's argmax s32 [k],
//                                       maximum f32 [k] and top probability f32 [k]
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "int8_matmul.h"
#include "kernel_ops.h"
#include "spin_pool.h"
#include "small_k_matmul.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace specsample {

namespace summary_avx512 {
using Vec = Lanes<16>;
#define SPECSAMPLE_SIMD __attribute__((target("avx512f,avx2,fma,f16c")))
#include "exp_simd.h"
#include "greedy_summary_simd.h"
#undef SPECSAMPLE_SIMD
}  // namespace summary_avx512

namespace summary_avx2 {
using Vec = Lanes<8>;
#define SPECSAMPLE_SIMD __attribute__((target("avx2,fma,f16c")))
#include "exp_simd.h"
#include "greedy_summary_simd.h"
#undef SPECSAMPLE_SIMD
}  // namespace summary_avx2
namespace {

// Below this many weights per thread, one thread's share is too small to pay for the
// hand-off (a few microseconds).
constexpr int64_t kMinWeightsPerThread = 1 << 16;
constexpr int64_t kMaxThreads = 64;
// Parts per thread of an 8-bit-activation product (taken from a counter: a thread that
// starts late or runs slower takes fewer).
constexpr int64_t kInt8PartsPerWorker = 4;

// How many parts to split a product over: one per thread (XLA's intra-op pool's size), fewer
// when a part would hold under kMinWeightsPerThread weights, and at most `splittable` (rows
// or columns).
int64_t PartsFor(ffi::ThreadPool& pool, int64_t weights, int64_t splittable) {
  int64_t parts = std::min<int64_t>(pool.num_threads(), kMaxThreads);
  parts = std::min<int64_t>({parts, weights / kMinWeightsPerThread, splittable});
  return std::max<int64_t>(1, parts);
}

// Runs part(0) .. part(parts - 1) on this thread and the spinning threads of SpinPool (as
// many threads in all as XLA's intra-op pool has).
template <typename Part>
void RunParts(ffi::ThreadPool& pool, int64_t parts, const Part& part) {
  if (parts == 1) {
    part(0);
    return;
  }
  SpinPool::Get(static_cast<int>(std::min<int64_t>(pool.num_threads(), kMaxThreads))).Run(parts, part);
}

// The instruction sets this CPU can run the kernels with, as bits 1 << Isa. The AVX-512
// kernels use AVX2 and FMA instructions too (8-float vectors for up to 8 rows), and both
// F16C (every CPU with AVX2 and FMA has it).
int CpuIsas() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  const bool avx_vnni = avx2 && __builtin_cpu_supports("avxvnni");
  return (avx2 ? 1 << static_cast<int>(Isa::kAvx2) : 0) |
         (avx512 ? 1 << static_cast<int>(Isa::kAvx512) : 0) |
         (avx_vnni ? 1 << static_cast<int>(Isa::kAvxVnni) : 0);
}

bool CpuHas(Isa isa) { return CpuIsas() & (1 << static_cast<int>(isa)); }

Isa BestIsa() {
  return CpuHas(Isa::kAvx512)    ? Isa::kAvx512
         : CpuHas(Isa::kAvxVnni) ? Isa::kAvxVnni
         : CpuHas(Isa::kAvx2)    ? Isa::kAvx2
                                 : Isa::kNone;
}

// The 8-bit-activation kernels of an instruction set: kAvx512 takes AVX-512 VNNI where the
// CPU has it (with BW and VL), else the best AVX2-width set.
IntIsa IntIsaOf(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl")) {
        return IntIsa::kAvx512Vnni;
      }
      return CpuHas(Isa::kAvxVnni) ? IntIsa::kAvxVnni : IntIsa::kAvx2;
    case Isa::kAvxVnni:
      return IntIsa::kAvxVnni;
    case Isa::kAvx2:
      return IntIsa::kAvx2;
    default:
      return IntIsa::kNone;
  }
}

// The instruction set the handlers use: the best this CPU has until
// SpecsampleSmallKMatmulUseIsa says otherwise.
std::atomic<Isa>& ActiveIsa() {
  static std::atomic<Isa> isa{BestIsa()};
  return isa;
}

// The checks both handlers make: x [k, d] with 1 <= k <= kMaxRows, kernels this CPU can run.
std::optional<ffi::Error> CheckRowsAndIsa(const char* name, int64_t k, Isa isa) {
  if (k < 1 || k > kMaxRows) {
    return ffi::Error::InvalidArgument(std::string(name) + ": k must be in 1.." +
                                       std::to_string(kMaxRows));
  }
  if (isa == Isa::kNone) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented,
                      std::string(name) + ": no AVX-512 or AVX2 + FMA kernels for this CPU");
  }
  return std::nullopt;
}

Tuning TuningFor(Isa isa, int64_t k, int64_t n) {
  return isa == Isa::kAvx512 ? avx512::DefaultTuning(k, n) : avx2::DefaultTuning(k, n);
}

// The C++ type of a weight of XLA type F32 or BF16.
template <ffi::DataType WeightType>
using WeightOf = std::conditional_t<WeightType == ffi::F32, float, Bf16>;

// y [k, n] = x [k, d] @ w [d, n], w float32 (F32) or bfloat16 (BF16). Part p sums rows
// [d * p / parts, d * (p + 1) / parts) of w, part 0 into y, the others into buffers of
// their own, added into y at the end (in order of p: the same order for every k).
template <ffi::DataType WeightType>
ffi::Error SmallKMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                        ffi::Buffer<WeightType> w, ffi::ResultBuffer<ffi::F32> y) {
  using W = WeightOf<WeightType>;
  const auto x_dims = x.dimensions();
  const auto w_dims = w.dimensions();
  if (x_dims.size() != 2 || w_dims.size() != 2 || x_dims[1] != w_dims[0]) {
    return ffi::Error::InvalidArgument("small_k_matmul: expected x [k, d] and w [d, n]");
  }
  const int64_t k = x_dims[0], d = x_dims[1], n = w_dims[1];
  const Isa isa = ActiveIsa().load(std::memory_order_relaxed);
  if (auto error = CheckRowsAndIsa("small_k_matmul", k, isa)) return *std::move(error);
  const float* xp = x.typed_data();
  const W* wp = reinterpret_cast<const W*>(w.typed_data());
  float* yp = y->typed_data();
  const Tuning tuning = TuningFor(isa, k, n);
  const int64_t parts = PartsFor(pool, d * n, d);
  std::unique_ptr<float[]> partial(parts > 1 ? new float[(parts - 1) * k * n] : nullptr);
  float* partial_p = partial.get();
  RunParts(pool, parts, [=](int64_t p) {
    float* out = p == 0 ? yp : partial_p + (p - 1) * k * n;
    const int64_t i0 = d * p / parts, i1 = d * (p + 1) / parts;
    if (isa == Isa::kAvx512) {
      avx512::PartialProduct(xp, k, d, wp, n, out, i0, i1, tuning);
    } else {
      avx2::PartialProduct(xp, k, d, wp, n, out, i0, i1, tuning);
    }
  });
  for (int64_t p = 1; p < parts; ++p) {
    const float* out = partial_p + (p - 1) * k * n;
    for (int64_t i = 0; i < k * n; ++i) yp[i] += out[i];
  }
  return ffi::Error::Success();
}

// y [k, n] = x [k, d] @ e.T for e's n rows of W (numbers or GGUF blocks), checked by the
// caller. Parts take contiguous runs of e's rows (and y's columns), so no partial sums are
// needed.
template <typename W>
void TransposedProduct(ffi::ThreadPool& pool, Isa isa, const float* xp, int64_t k, int64_t d,
                       const W* ep, int64_t n, float* yp) {
  const int64_t prefetch_bytes = TuningFor(isa, k, n).prefetch_bytes;
  const int64_t parts = PartsFor(pool, d * n, n);
  RunParts(pool, parts, [=](int64_t p) {
    const int64_t j0 = n * p / parts, j1 = n * (p + 1) / parts;
    if (isa == Isa::kAvx512) {
      avx512::EmbeddingProduct(xp, k, d, ep, n, yp, j0, j1, prefetch_bytes);
    } else {
      avx2::EmbeddingProduct(xp, k, d, ep, n, yp, j0, j1, prefetch_bytes);
    }
  });
}

// y [k, n] = x [k, d] @ e [n, d].T, e float32 or bfloat16 (TransposedProduct).
template <ffi::DataType WeightType>
ffi::Error SmallKMatmulTransposed(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                                  ffi::Buffer<WeightType> e, ffi::ResultBuffer<ffi::F32> y) {
  using W = WeightOf<WeightType>;
  const auto x_dims = x.dimensions();
  const auto e_dims = e.dimensions();
  if (x_dims.size() != 2 || e_dims.size() != 2 || x_dims[1] != e_dims[1]) {
    return ffi::Error::InvalidArgument("small_k_matmul_transposed: expected x [k, d], e [n, d]");
  }
  const int64_t k = x_dims[0], d = x_dims[1], n = e_dims[0];
  const Isa isa = ActiveIsa().load(std::memory_order_relaxed);
  if (auto error = CheckRowsAndIsa("small_k_matmul_transposed", k, isa)) {
    return *std::move(error);
  }
  TransposedProduct(pool, isa, x.typed_data(), k, d,
                    reinterpret_cast<const W*>(e.typed_data()), n, y->typed_data());
  return ffi::Error::Success();
}

// y [k, n] = x [k, d] @ e.T for e [n, d] in GGUF blocks B: `blocks` u8 [n, d / kWeightsPer<B>
// * sizeof(B)], each row of e as the file stores it (TransposedProduct).
template <typename B>
ffi::Error SmallKMatmulBlocks(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                              ffi::Buffer<ffi::U8> blocks, ffi::ResultBuffer<ffi::F32> y) {
  const auto x_dims = x.dimensions();
  const auto b_dims = blocks.dimensions();
  constexpr int64_t kWeights = kWeightsPer<B>;
  if (x_dims.size() != 2 || b_dims.size() != 2 || x_dims[1] % kWeights != 0 ||
      b_dims[1] != x_dims[1] / kWeights * static_cast<int64_t>(sizeof(B))) {
    return ffi::Error::InvalidArgument(
        "small_k_matmul_blocks: expected x [k, d] (d a multiple of " + std::to_string(kWeights) +
        ") and blocks [n, d / " + std::to_string(kWeights) + " * " + std::to_string(sizeof(B)) +
        "]");
  }
  const int64_t k = x_dims[0], d = x_dims[1], n = b_dims[0];
  const Isa isa = ActiveIsa().load(std::memory_order_relaxed);
  if (auto error = CheckRowsAndIsa("small_k_matmul_blocks", k, isa)) return *std::move(error);
  TransposedProduct(pool, isa, x.typed_data(), k, d,
                    reinterpret_cast<const B*>(blocks.typed_data()), n, y->typed_data());
  return ffi::Error::Success();
}

// y [k, n] = x [k, d] @ W.T for W [n, d] packed for 8-bit activations (int8_matmul.h):
// `packed` u8 [ceil(n / 16), d / weights per block * bytes per block]. x is quantized once,
// by this thread, in `passes` passes (1, or 2: the rounding error quantized again, the two
// partial products added); parts take contiguous runs of groups (16 rows of W, 16 columns
// of y). `name` names the handler in errors.
template <Packed P>
std::optional<ffi::Error> Int8ProductInto(const char* name, ffi::ThreadPool& pool,
                                          ffi::Buffer<ffi::F32>& x, ffi::Buffer<ffi::U8>& packed,
                                          int64_t n, int32_t passes, float* y) {
  using Layout = PackedLayout<P>;
  const auto x_dims = x.dimensions();
  const auto w_dims = packed.dimensions();
  if (x_dims.size() != 2 || w_dims.size() != 2 || x_dims[1] % Layout::kWeights != 0 ||
      w_dims[0] != (n + kGroupRows - 1) / kGroupRows ||
      w_dims[1] != x_dims[1] / Layout::kWeights * Layout::kBytes) {
    return ffi::Error::InvalidArgument(
        std::string(name) + ": expected x [k, d] (d a multiple of " +
        std::to_string(Layout::kWeights) + "), packed [ceil(n / 16), d / " +
        std::to_string(Layout::kWeights) + " * " + std::to_string(Layout::kBytes) +
        "] and n = " + std::to_string(n) + " rows of W");
  }
  if (passes != 1 && passes != 2) {
    return ffi::Error::InvalidArgument(std::string(name) + ": passes must be 1 or 2, got " +
                                       std::to_string(passes));
  }
  const int64_t k = x_dims[0], d = x_dims[1], groups = w_dims[0];
  const Isa isa = ActiveIsa().load(std::memory_order_relaxed);
  if (auto error = CheckRowsAndIsa(name, k, isa)) return error;
  const IntIsa int_isa = IntIsaOf(isa);
  // The quantized rows and (two passes) both passes' products, in buffers of this thread's
  // (the parts end before this returns).
  thread_local std::vector<int32_t> scratch;
  thread_local std::vector<float> partial;
  const int64_t words = ActivationBuffer::Words(passes * k, d);
  if (static_cast<int64_t>(scratch.size()) < words) scratch.resize(words);
  const Activations a = ActivationBuffer::Into(scratch.data(), passes * k, d);
  QuantizeActivations(int_isa, x.typed_data(), d, a, passes);
  float* yp = y;
  if (passes == 2) {
    if (static_cast<int64_t>(partial.size()) < 2 * k * n) partial.resize(2 * k * n);
    yp = partial.data();
  }
  const uint8_t* w = packed.typed_data();
  const int64_t group_bytes = w_dims[1];
  const int64_t workers = PartsFor(pool, groups * kGroupRows * d, groups);
  const int64_t parts = workers == 1 ? 1 : std::min(groups, workers * kInt8PartsPerWorker);
  RunParts(pool, parts, [=](int64_t p) {
    Int8ProductPart(int_isa, P, a, w, group_bytes, n, yp, groups * p / parts,
                    groups * (p + 1) / parts);
  });
  if (passes == 2) AddSecondPass(yp, k * n, y);
  return std::nullopt;
}

template <Packed P>
ffi::Error Int8Matmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::U8> packed,
                      ffi::ResultBuffer<ffi::F32> y, int32_t passes) {
  const auto y_dims = y->dimensions();
  if (y_dims.size() != 2 || x.dimensions().size() != 2 || y_dims[0] != x.dimensions()[0]) {
    return ffi::Error::InvalidArgument("int8_matmul: expected x [k, d] and y [k, n]");
  }
  if (auto error = Int8ProductInto<P>("int8_matmul", pool, x, packed, y_dims[1], passes,
                                      y->typed_data())) {
    return *std::move(error);
  }
  return ffi::Error::Success();
}

// What greedy drafting reads of the product y [k, n] = x @ W.T (Int8Matmul's numbers), row
// by row (greedy_summary_simd.h): the argmax token s32 [k], the largest logit f32 [k] and the
// softmax's probability there f32 [k]. y itself stays in a buffer of this thread's.
template <Packed P>
ffi::Error Int8Greedy(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::U8> packed,
                      ffi::ResultBuffer<ffi::S32> token, ffi::ResultBuffer<ffi::F32> best,
                      ffi::ResultBuffer<ffi::F32> top, int32_t passes, int64_t n) {
  const auto x_dims = x.dimensions();
  if (x_dims.size() != 2 || n < 1 || token->element_count() != x_dims[0] ||
      best->element_count() != x_dims[0] || top->element_count() != x_dims[0]) {
    return ffi::Error::InvalidArgument(
        "int8_greedy: expected x [k, d], n >= 1 and k tokens, maxima and probabilities");
  }
  const int64_t k = x_dims[0];
  thread_local std::vector<float> logits;
  if (static_cast<int64_t>(logits.size()) < k * n) logits.resize(k * n);
  if (auto error = Int8ProductInto<P>("int8_greedy", pool, x, packed, n, passes, logits.data())) {
    return *std::move(error);
  }
  const bool wide = ActiveIsa().load(std::memory_order_relaxed) == Isa::kAvx512;
  for (int64_t r = 0; r < k; ++r) {
    int32_t* t = token->typed_data() + r;
    float* b = best->typed_data() + r;
    float* p = top->typed_data() + r;
    if (wide) {
      summary_avx512::GreedySummary(logits.data() + r * n, n, t, b, p);
    } else {
      summary_avx2::GreedySummary(logits.data() + r * n, n, t, b, p);
    }
  }
  return ffi::Error::Success();
}

}  // namespace

Isa ActiveKernelIsa() { return ActiveIsa().load(std::memory_order_relaxed); }

IntIsa ActiveIntIsa() { return IntIsaOf(ActiveKernelIsa()); }

void QuantizeActivations(IntIsa isa, const float* x, int64_t ldx, const Activations& a,
                         int passes, int64_t r0, int64_t r1) {
  if (isa == IntIsa::kAvx512Vnni) {
    if (passes == 2) return int512vnni::QuantizeRowsWithError(x, ldx, a, r0, r1);
    return int512vnni::QuantizeRows(x, ldx, a, r0, r1);
  }
  // the same numbers at either AVX2 width
  if (passes == 2) return intavx2::QuantizeRowsWithError(x, ldx, a, r0, r1);
  return intavx2::QuantizeRows(x, ldx, a, r0, r1);
}

void AddSecondPass(const float* partial, int64_t count, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = partial[i] + partial[count + i];
}

void Int8ProductPart(IntIsa isa, Packed format, const Activations& a, const uint8_t* w,
                     int64_t group_bytes, int64_t n, float* y, int64_t g0, int64_t g1) {
  switch (isa) {
    case IntIsa::kAvx512Vnni:
      return int512vnni::ProductFor(format)(a, w, group_bytes, n, y, g0, g1);
    case IntIsa::kAvxVnni:
      return intavxvnni::ProductFor(format)(a, w, group_bytes, n, y, g0, g1);
    default:
      return intavx2::ProductFor(format)(a, w, group_bytes, n, y, g0, g1);
  }
}

}  // namespace specsample

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleSmallKMatmul, specsample::SmallKMatmul<ffi::F32>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleSmallKMatmulTransposed, specsample::SmallKMatmulTransposed<ffi::F32>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleSmallKMatmulBf16, specsample::SmallKMatmul<ffi::BF16>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleSmallKMatmulTransposedBf16, specsample::SmallKMatmulTransposed<ffi::BF16>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

#define SPECSAMPLE_BLOCK_HANDLER(symbol, block)                                  \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(symbol, specsample::SmallKMatmulBlocks<block>, \
                                ffi::Ffi::Bind()                               \
                                    .Ctx<ffi::ThreadPool>()                    \
                                    .Arg<ffi::Buffer<ffi::F32>>()              \
                                    .Arg<ffi::Buffer<ffi::U8>>()               \
                                    .Ret<ffi::Buffer<ffi::F32>>());
SPECSAMPLE_BLOCK_HANDLER(SpecsampleSmallKMatmulQ8_0, specsample::BlockQ8_0)
SPECSAMPLE_BLOCK_HANDLER(SpecsampleSmallKMatmulQ4_0, specsample::BlockQ4_0)
SPECSAMPLE_BLOCK_HANDLER(SpecsampleSmallKMatmulQ4_1, specsample::BlockQ4_1)
SPECSAMPLE_BLOCK_HANDLER(SpecsampleSmallKMatmulQ5_0, specsample::BlockQ5_0)
SPECSAMPLE_BLOCK_HANDLER(SpecsampleSmallKMatmulQ4_K, specsample::BlockQ4_K)
SPECSAMPLE_BLOCK_HANDLER(SpecsampleSmallKMatmulQ6_K, specsample::BlockQ6_K)
#undef SPECSAMPLE_BLOCK_HANDLER

#define SPECSAMPLE_INT8_HANDLER(symbol, packed)                                          \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(symbol, specsample::Int8Matmul<specsample::Packed::packed>, \
                                ffi::Ffi::Bind()                                       \
                                    .Ctx<ffi::ThreadPool>()                            \
                                    .Arg<ffi::Buffer<ffi::F32>>()                      \
                                    .Arg<ffi::Buffer<ffi::U8>>()                       \
                                    .Ret<ffi::Buffer<ffi::F32>>()                      \
                                    .Attr<int32_t>("passes"));
SPECSAMPLE_INT8_HANDLER(SpecsampleInt8MatmulQ8_0, kQ8_0)
SPECSAMPLE_INT8_HANDLER(SpecsampleInt8MatmulQ4_0, kQ4_0)
SPECSAMPLE_INT8_HANDLER(SpecsampleInt8MatmulQ4_1, kQ4_1)
SPECSAMPLE_INT8_HANDLER(SpecsampleInt8MatmulQ5_0, kQ5_0)
SPECSAMPLE_INT8_HANDLER(SpecsampleInt8MatmulQ4_K, kQ4_K)
SPECSAMPLE_INT8_HANDLER(SpecsampleInt8MatmulQ6_K, kQ6_K)

#define SPECSAMPLE_INT8_GREEDY_HANDLER(symbol, packed)                                    \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(symbol, specsample::Int8Greedy<specsample::Packed::packed>, \
                                ffi::Ffi::Bind()                                        \
                                    .Ctx<ffi::ThreadPool>()                             \
                                    .Arg<ffi::Buffer<ffi::F32>>()                       \
                                    .Arg<ffi::Buffer<ffi::U8>>()                        \
                                    .Ret<ffi::Buffer<ffi::S32>>()                       \
                                    .Ret<ffi::Buffer<ffi::F32>>()                       \
                                    .Ret<ffi::Buffer<ffi::F32>>()                       \
                                    .Attr<int32_t>("passes")                            \
                                    .Attr<int64_t>("n"));
SPECSAMPLE_INT8_GREEDY_HANDLER(SpecsampleInt8GreedyQ8_0, kQ8_0)
SPECSAMPLE_INT8_GREEDY_HANDLER(SpecsampleInt8GreedyQ4_0, kQ4_0)
SPECSAMPLE_INT8_GREEDY_HANDLER(SpecsampleInt8GreedyQ4_1, kQ4_1)
SPECSAMPLE_INT8_GREEDY_HANDLER(SpecsampleInt8GreedyQ5_0, kQ5_0)
SPECSAMPLE_INT8_GREEDY_HANDLER(SpecsampleInt8GreedyQ4_K, kQ4_K)
SPECSAMPLE_INT8_GREEDY_HANDLER(SpecsampleInt8GreedyQ6_K, kQ6_K)
#undef SPECSAMPLE_INT8_GREEDY_HANDLER
#undef SPECSAMPLE_INT8_HANDLER

// The instruction sets this CPU can run the kernels with, as bits 1 << Isa (Isa::kAvx2 = 1,
// Isa::kAvx512 = 2).
extern "C" int SpecsampleSmallKMatmulCpuIsas() { return specsample::CpuIsas(); }

// Makes the handlers use the kernels of `isa` (an Isa; Isa::kNone: the best this CPU has)
// and returns the instruction set they now use: Isa::kNone when this CPU lacks `isa`, and
// every call then fails.
extern "C" int SpecsampleSmallKMatmulUseIsa(int isa) {
  using specsample::Isa;
  Isa use = Isa::kNone;
  if (isa == static_cast<int>(Isa::kNone)) {
    use = specsample::BestIsa();
  } else if (isa >= static_cast<int>(Isa::kAvx2) && isa <= static_cast<int>(Isa::kAvxVnni) &&
             (specsample::CpuIsas() & (1 << isa))) {
    use = static_cast<Isa>(isa);
  }
  specsample::ActiveIsa().store(use);
  return static_cast<int>(use);
}

// The 8-bit-activation kernels the handlers use now (an IntIsa: 0 none, 1 AVX2, 2 AVX-VNNI,
// 3 AVX-512 VNNI).
extern "C" int SpecsampleSmallKMatmulIntIsa() {
  return static_cast<int>(specsample::IntIsaOf(specsample::ActiveIsa().load()));
}
