// XLA FFI handler for cached attention on CPUs (AVX-512 or AVX2 + FMA), called from
// specsample/kernels/attention.py as the custom call "specsample_cached_attention":
//   queries f32 [B, K, H, D], keys [B, C, KV, D], values [B, C, KV, D] (the caches: both
//   f32 or both bf16, widened as read),
//   allowed pred [B, K, C] (which entries each query sees), ends s32 [B, K] (one past each
//   query's last allowed entry), attribute scale -> out f32 [B, K, H, D],
// query head h reading cache head h / (H / KV) (grouped-query attention). Each query reads
// only the entries before its end, whatever the capacity C, and is computed alone
// (attention_simd.h), so a verified position's attention equals a plain decoding step's
// bit for bit. Parts: sets of the query heads that read one cache head, spread over
// SpinPool's threads.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attention.h"
#include "kernel_ops.h"
#include "small_k_matmul.h"
#include "spin_pool.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace specsample {


namespace attention_avx512 {
using Vec = Lanes<16>;
#define SPECSAMPLE_SIMD __attribute__((target("avx512f,avx2,fma,f16c")))
#include "attention_simd.h"
#undef SPECSAMPLE_SIMD
}  // namespace attention_avx512

namespace attention_avx2 {
using Vec = Lanes<8>;
#define SPECSAMPLE_SIMD __attribute__((target("avx2,fma,f16c")))
#include "attention_simd.h"
#undef SPECSAMPLE_SIMD
}  // namespace attention_avx2

namespace {

template <typename T>
void AttendRows(Isa isa, int threads, const float* qp, const T* kp, const T* vp, const bool* ap,
                const int32_t* ep, int64_t batch, int64_t rows, int64_t heads, int64_t kv_heads,
                int64_t d, int64_t capacity, float scale, float* op) {
  const int64_t groups = heads / kv_heads;
  const int64_t stride = kv_heads * d;  // between cache entries
  // A part: a set of the query heads that read one row's cache head (query i, head g:
  // number i * groups + g, in that order), reading the cache once. A cache head's heads are
  // split into `splits` sets only to give every thread work (a set's heads in multiples of
  // the kernel's group) and to bound the scores' scratch (at most kMaxSet heads).
  constexpr int64_t kMaxSet = 32;
  const int64_t group = isa == Isa::kAvx512 ? attention_avx512::kGroup : attention_avx2::kGroup;
  const int64_t heads_per_row = rows * groups;  // of one cache head
  const int64_t cache_heads = batch * kv_heads;
  const int64_t most_splits = (heads_per_row + group - 1) / group;
  const int64_t wanted = std::max((2 * threads + cache_heads - 1) / cache_heads,
                                  (heads_per_row + kMaxSet - 1) / kMaxSet);
  const int64_t splits = std::max<int64_t>(1, std::min(most_splits, wanted));
  // <= kMaxSet: splits >= heads_per_row / kMaxSet and kMaxSet is a multiple of the group.
  const int64_t per_set = (most_splits + splits - 1) / splits * group;
  auto part = [=](int64_t p) {
    const int64_t split = p % splits, kv = (p / splits) % kv_heads, b = p / (splits * kv_heads);
    const T* cache_k = kp + b * capacity * stride + kv * d;
    const T* cache_v = vp + b * capacity * stride + kv * d;
    const int64_t first = split * per_set;
    const int64_t n = std::min(per_set, heads_per_row - first);
    if (n <= 0) return;
    const float* query[kMaxSet];
    float* result[kMaxSet];
    const bool* seen[kMaxSet];
    int64_t ends[kMaxSet];
    int64_t widest = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = (first + j) / groups, g = (first + j) % groups;
      const int64_t at = ((b * rows + i) * heads + kv * groups + g) * d;
      query[j] = qp + at;
      result[j] = op + at;
      seen[j] = ap + (b * rows + i) * capacity;
      ends[j] = ep[b * rows + i];
      widest = std::max(widest, ends[j]);
    }
    thread_local std::vector<float> scores;
    if (static_cast<int64_t>(scores.size()) < n * (widest + 4)) scores.resize(n * (widest + 4));
    if (widest == 0) {  // none sees anything
      for (int64_t j = 0; j < n; ++j) std::fill(result[j], result[j] + d, 0.0f);
      return;
    } else if (isa == Isa::kAvx512) {
      attention_avx512::AttendHeadSet(n, query, cache_k, cache_v, stride, seen,
                                      ends, d, scale, scores.data(), result);
    } else {
      attention_avx2::AttendHeadSet(n, query, cache_k, cache_v, stride, seen,
                                    ends, d, scale, scores.data(), result);
    }
    for (int64_t j = 0; j < n; ++j) {  // a head that sees nothing while another of the set does
      if (ends[j] == 0) std::fill(result[j], result[j] + d, 0.0f);
    }
  };
  const int64_t parts = cache_heads * splits;
  if (parts == 1 || threads <= 1) {
    for (int64_t p = 0; p < parts; ++p) part(p);
  } else {
    SpinPool::Get(threads).Run(parts, part);
  }
}

}  // namespace

void CachedAttentionRows(Isa isa, int threads, const float* queries, CacheNumbers numbers,
                         const void* keys, const void* values, const bool* allowed,
                         const int32_t* ends, int64_t batch, int64_t rows, int64_t heads,
                         int64_t kv_heads, int64_t head_dim, int64_t capacity, float scale,
                         float* out) {
  if (numbers == CacheNumbers::kBfloat16) {
    AttendRows(isa, threads, queries, static_cast<const Bf16*>(keys),
               static_cast<const Bf16*>(values), allowed, ends, batch, rows, heads, kv_heads,
               head_dim, capacity, scale, out);
  } else {
    AttendRows(isa, threads, queries, static_cast<const float*>(keys),
               static_cast<const float*>(values), allowed, ends, batch, rows, heads, kv_heads,
               head_dim, capacity, scale, out);
  }
}

namespace {

constexpr int64_t kMaxThreads = 64;

ffi::Error CachedAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> queries,
                           ffi::AnyBuffer keys, ffi::AnyBuffer values,
                           ffi::Buffer<ffi::PRED> allowed, ffi::Buffer<ffi::S32> ends,
                           ffi::ResultBuffer<ffi::F32> out, float scale) {
  const auto q = queries.dimensions();
  const auto k = keys.dimensions();
  const auto a = allowed.dimensions();
  const auto e = ends.dimensions();
  if (q.size() != 4 || k.size() != 4 || a.size() != 3 || e.size() != 2 ||
      !std::equal(k.begin(), k.end(), values.dimensions().begin(), values.dimensions().end()) ||
      k[0] != q[0] || k[3] != q[3] || q[2] % k[2] != 0 ||
      a[0] != q[0] || a[1] != q[1] || a[2] != k[1] || e[0] != q[0] || e[1] != q[1]) {
    return ffi::Error::InvalidArgument(
        "cached_attention: expected queries [B, K, H, D], keys and values [B, C, KV, D] (H a "
        "multiple of KV), allowed [B, K, C] and ends [B, K]");
  }
  const int64_t batch = q[0], rows = q[1], heads = q[2], d = q[3];
  const int64_t capacity = k[1], kv_heads = k[2];
  const Isa isa = ActiveKernelIsa();
  if (auto error = CheckAttention(isa, d, ends.typed_data(), batch * rows, capacity)) {
    return *std::move(error);
  }
  CacheNumbers numbers;
  if (auto error = CacheNumbersOf(keys.element_type(), values.element_type(), &numbers)) {
    return *std::move(error);
  }
  CachedAttentionRows(isa, static_cast<int>(std::min<int64_t>(pool.num_threads(), kMaxThreads)),
                      queries.typed_data(), numbers, keys.untyped_data(), values.untyped_data(),
                      allowed.typed_data(), ends.typed_data(), batch, rows, heads, kv_heads, d,
                      capacity, scale, out->typed_data());
  return ffi::Error::Success();
}

}  // namespace
}  // namespace specsample

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleCachedAttention, specsample::CachedAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("scale"));
