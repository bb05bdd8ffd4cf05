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
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "small_k_matmul.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace specsample {
namespace {

// Below this many weights per thread, one thread's share is too small to pay for the
// hand-off (a few microseconds).
constexpr int64_t kMinWeightsPerThread = 1 << 16;
constexpr int64_t kMaxThreads = 64;

// Waits for parts that other threads have claimed and are running: spins briefly (a part
// takes microseconds to milliseconds), then yields the core, which a descheduled worker
// on a busy 2-core machine may need.
void WaitUntilDone(const std::atomic<int64_t>& done, int64_t parts) {
  for (int spins = 0; done.load(std::memory_order_acquire) < parts; ++spins) {
    if (spins < 4096) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

// How many parts to split a product over: one per pool thread, fewer when a part would
// hold under kMinWeightsPerThread weights, and at most `splittable` (rows or columns).
int64_t PartsFor(ffi::ThreadPool& pool, int64_t weights, int64_t splittable) {
  int64_t parts = std::min<int64_t>(pool.num_threads(), kMaxThreads);
  parts = std::min<int64_t>({parts, weights / kMinWeightsPerThread, splittable});
  return std::max<int64_t>(1, parts);
}

// Runs part(0) .. part(parts - 1) on this thread and the pool. Parts are claimed from a
// counter by this thread and by the tasks handed to the pool, so the call never waits on a
// task that has not started (the pool may be busy, even with another of these calls); a
// task that starts after all parts are claimed returns at once without calling `part`.
// The counters live in shared state, not on this stack, because such a task may start
// after this call has returned.
template <typename Part>
void RunParts(ffi::ThreadPool& pool, int64_t parts, Part part) {
  if (parts == 1) {
    part(0);
    return;
  }
  struct Job {
    explicit Job(Part p, int64_t n) : part(std::move(p)), parts(n) {}
    Part part;
    int64_t parts;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto job = std::make_shared<Job>(std::move(part), parts);
  auto work = [job] {
    for (int64_t p; (p = job->next.fetch_add(1)) < job->parts;) {
      job->part(p);
      job->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 1; t < parts; ++t) pool.Schedule(decltype(work)(work));
  work();
  WaitUntilDone(job->done, parts);
}

// The instruction sets this CPU can run the kernels with, as bits 1 << Isa. The AVX-512
// kernels use AVX2 and FMA instructions too (8-float vectors for up to 8 rows), and both
// F16C (every CPU with AVX2 and FMA has it).
int CpuIsas() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  return (avx2 ? 1 << static_cast<int>(Isa::kAvx2) : 0) |
         (avx512 ? 1 << static_cast<int>(Isa::kAvx512) : 0);
}

Isa BestIsa() {
  const int isas = CpuIsas();
  return isas & (1 << static_cast<int>(Isa::kAvx512))  ? Isa::kAvx512
         : isas & (1 << static_cast<int>(Isa::kAvx2)) ? Isa::kAvx2
                                                       : Isa::kNone;
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

}  // namespace
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
  } else if ((isa == static_cast<int>(Isa::kAvx2) || isa == static_cast<int>(Isa::kAvx512)) &&
             (specsample::CpuIsas() & (1 << isa))) {
    use = static_cast<Isa>(isa);
  }
  specsample::ActiveIsa().store(use);
  return static_cast<int>(use);
}
