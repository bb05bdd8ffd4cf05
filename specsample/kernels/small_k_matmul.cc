// XLA FFI handlers for the small-k products of small_k_matmul.h (CPU, AVX-512), called
// from specsample/kernels/small_k.py as custom calls:
//   "specsample_small_k_matmul":            x f32 [k, d], w f32 [d, n] -> y f32 [k, n]
//   "specsample_small_k_matmul_transposed": x f32 [k, d], e f32 [n, d] -> y f32 [k, n]
// with 1 <= k <= kMaxRows, the work split over XLA's intra-op thread pool.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
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

ffi::Error SmallKMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                        ffi::ResultBuffer<ffi::F32> y) {
  const auto x_dims = x.dimensions();
  const auto w_dims = w.dimensions();
  if (x_dims.size() != 2 || w_dims.size() != 2 || x_dims[1] != w_dims[0]) {
    return ffi::Error::InvalidArgument("small_k_matmul: expected x [k, d] and w [d, n]");
  }
  const int64_t k = x_dims[0], d = x_dims[1], n = w_dims[1];
  if (k < 1 || k > kMaxRows) {
    return ffi::Error::InvalidArgument("small_k_matmul: k must be in 1..64");
  }
  if (!__builtin_cpu_supports("avx512f")) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented, "small_k_matmul: the CPU lacks AVX-512");
  }
  const float* xp = x.typed_data();
  const float* wp = w.typed_data();
  float* yp = y->typed_data();
  const Tuning tuning = DefaultTuning(k);
  int64_t threads = std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), kMaxThreads));
  threads = std::max<int64_t>(1, std::min<int64_t>(threads, d * n / kMinWeightsPerThread));
  threads = std::min<int64_t>(threads, d);
  if (threads == 1) {
    PartialProduct(xp, k, d, wp, n, yp, 0, d, tuning);
    return ffi::Error::Success();
  }
  // Part p sums rows [d * p / parts, d * (p + 1) / parts) of w, part 0 into y, the others
  // into buffers of their own, added into y at the end. Parts are claimed from a counter by
  // this thread and by the tasks handed to the pool, so the call never waits on a task that
  // has not started (the pool may be busy, even with another of these calls); a task that
  // starts after all parts are claimed returns at once. The job is shared, not on this
  // stack, because such a task may start after this call has returned.
  struct Job {
    const float* x;
    const float* w;
    float* y;
    int64_t k, d, n, parts;
    Tuning tuning;
    std::unique_ptr<float[]> partial;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto job = std::make_shared<Job>();
  job->x = xp, job->w = wp, job->y = yp, job->k = k, job->d = d, job->n = n;
  job->parts = threads, job->tuning = tuning;
  job->partial.reset(new float[(threads - 1) * k * n]);
  auto work = [job] {
    for (int64_t p; (p = job->next.fetch_add(1)) < job->parts;) {
      float* out = p == 0 ? job->y : job->partial.get() + (p - 1) * job->k * job->n;
      PartialProduct(job->x, job->k, job->d, job->w, job->n, out, job->d * p / job->parts,
                     job->d * (p + 1) / job->parts, job->tuning);
      job->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 1; t < threads; ++t) pool.Schedule(decltype(work)(work));
  work();
  WaitUntilDone(job->done, threads);
  for (int64_t t = 1; t < threads; ++t) {
    const float* out = job->partial.get() + (t - 1) * k * n;
    for (int64_t e = 0; e < k * n; ++e) yp[e] += out[e];
  }
  return ffi::Error::Success();
}

// y [k, n] = x [k, d] @ e [n, d].T. Threads take contiguous runs of e's rows (and y's
// columns), so no partial sums are needed.
ffi::Error SmallKMatmulTransposed(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                                  ffi::Buffer<ffi::F32> e, ffi::ResultBuffer<ffi::F32> y) {
  const auto x_dims = x.dimensions();
  const auto e_dims = e.dimensions();
  if (x_dims.size() != 2 || e_dims.size() != 2 || x_dims[1] != e_dims[1]) {
    return ffi::Error::InvalidArgument("small_k_matmul_transposed: expected x [k, d], e [n, d]");
  }
  const int64_t k = x_dims[0], d = x_dims[1], n = e_dims[0];
  if (k < 1 || k > kMaxRows) {
    return ffi::Error::InvalidArgument("small_k_matmul_transposed: k must be in 1..64");
  }
  if (!__builtin_cpu_supports("avx512f")) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented, "small_k_matmul: the CPU lacks AVX-512");
  }
  struct Job {
    const float* x;
    const float* e;
    float* y;
    int64_t k, d, n, parts, prefetch_bytes;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  int64_t threads = std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), kMaxThreads));
  threads = std::max<int64_t>(1, std::min<int64_t>(threads, d * n / kMinWeightsPerThread));
  threads = std::min<int64_t>(threads, n);
  auto job = std::make_shared<Job>();
  job->x = x.typed_data(), job->e = e.typed_data(), job->y = y->typed_data();
  job->k = k, job->d = d, job->n = n, job->parts = threads;
  job->prefetch_bytes = DefaultTuning(k).prefetch_bytes;
  auto work = [job] {  // claims parts as in SmallKMatmul
    for (int64_t p; (p = job->next.fetch_add(1)) < job->parts;) {
      EmbeddingProduct(job->x, job->k, job->d, job->e, job->n, job->y, job->n * p / job->parts,
                       job->n * (p + 1) / job->parts, job->prefetch_bytes);
      job->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 1; t < threads; ++t) pool.Schedule(decltype(work)(work));
  work();
  WaitUntilDone(job->done, threads);
  return ffi::Error::Success();
}

}  // namespace
}  // namespace specsample

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleSmallKMatmul, specsample::SmallKMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleSmallKMatmulTransposed,
                              specsample::SmallKMatmulTransposed,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

extern "C" int SpecsampleSmallKMatmulSupported() {
  return __builtin_cpu_supports("avx512f") ? 1 : 0;
}
