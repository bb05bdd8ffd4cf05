// XLA FFI handlers for a decoder layer with 8-bit activations in two calls (called from
// specsample/kernels/decoder_layer.py), so that a decoding step runs two custom calls per
// layer instead of a few dozen small XLA operations:
//
//   "specsample_int8_qkv": x f32 [R, d], the attention norm's scale f32 [d], the query, key
//     and value projections packed (int8_blocks; formats as attributes), cos, sin f32
//     [R, head_dim / 2] (of each row's position) -> queries [R, Hq * D], keys and values
//     [R, Hkv * D]: h = rmsnorm(x), quantized once for the three products, then the rotary
//     embedding of queries and keys (rotate-half).
//   "specsample_int8_attention_mlp": x f32 [B, K, d], the queries [B, K, Hq * D], the caches
//     [B, C, Hkv, D] (this call's keys and values written), allowed pred [B, K, C], ends
//     s32 [B, K], the output projection, the MLP norm's scale, the gate, up and down
//     projections -> x + attention + SwiGLU MLP, [B, K, d].
//
// Every step is computed per row (RMS sums by a fixed tree, products and attention row-count
// invariant), so a row's numbers do not depend on the others in the call: a verify call
// equals plain decoding steps bit for bit. The float steps: rmsnorm(x) = (x * (1 / sqrt(
// mean(x^2) + eps))) * scale; silu(g) * u = (g * sigmoid(g)) * u with sigmoid from exp of
// -|g| (attention_simd.h's Exp); rotary: first * cos - second * sin, second * cos + first * sin.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "attention.h"
#include "kernel_ops.h"
#include "small_k_matmul.h"
#include "spin_pool.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace specsample {

namespace layer_avx512 {
using Vec = Lanes<16>;
#define SPECSAMPLE_SIMD __attribute__((target("avx512f,avx2,fma,f16c")))
#include "attention_simd.h"
#include "decoder_layer_simd.h"
#undef SPECSAMPLE_SIMD
}  // namespace layer_avx512

namespace layer_avx2 {
using Vec = Lanes<8>;
#define SPECSAMPLE_SIMD __attribute__((target("avx2,fma,f16c")))
#include "attention_simd.h"
#include "decoder_layer_simd.h"
#undef SPECSAMPLE_SIMD
}  // namespace layer_avx2

namespace {

constexpr int64_t kMaxThreads = 64;
constexpr int64_t kMinGroupsPerPart = 4;  // 64 rows of W: a part worth a hand-off
constexpr int64_t kPartsPerThread = 4;

// A packed matrix (int8_blocks.Int8BlockMatrix) of n rows over d inputs.
struct Matrix {
  const uint8_t* data;
  int64_t group_bytes, groups, n;
  Packed format;
};

constexpr int64_t kPackedBytes[] = {544, 288, 320, 352, 2368, 3360};  // by Packed
constexpr int64_t kPackedWeights[] = {32, 32, 32, 32, 256, 256};

std::optional<ffi::Error> MatrixOf(const char* name, ffi::Buffer<ffi::U8>& buffer, int32_t format,
                                   int64_t n, int64_t d, Matrix* out) {
  const auto dims = buffer.dimensions();
  if (format < 0 || format > static_cast<int32_t>(Packed::kQ6_K)) {
    return ffi::Error::InvalidArgument(std::string(name) + ": unknown block format");
  }
  const int64_t weights = kPackedWeights[format], bytes = kPackedBytes[format];
  if (dims.size() != 2 || d % weights != 0 || dims[0] != (n + kGroupRows - 1) / kGroupRows ||
      dims[1] != d / weights * bytes) {
    return ffi::Error::InvalidArgument(std::string(name) + ": expected packed [ceil(" +
                                       std::to_string(n) + " / 16), " + std::to_string(d) +
                                       " / " + std::to_string(weights) + " * " +
                                       std::to_string(bytes) + "]");
  }
  *out = Matrix{buffer.typed_data(), dims[1], dims[0], n, static_cast<Packed>(format)};
  return std::nullopt;
}

// One product of quantized rows with a matrix: y [k, n].
struct Product {
  Matrix w;
  float* y;
};

// The products of the same quantized rows with several matrices, in one parallel job
// (parts: runs of at least kMinGroupsPerPart groups of one matrix).
void RunProductsOnce(int threads, IntIsa isa, const Activations& a, const Product* products,
                     int count) {
  struct Part {
    int product;
    int64_t g0, g1;
  };
  thread_local std::vector<Part> parts;
  parts.clear();
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += products[i].w.groups;
  const int64_t wanted = std::max<int64_t>(1, threads * kPartsPerThread);
  for (int i = 0; i < count; ++i) {
    const int64_t groups = products[i].w.groups;
    const int64_t split = std::clamp<int64_t>(groups * wanted / std::max<int64_t>(total, 1), 1,
                                              std::max<int64_t>(1, groups / kMinGroupsPerPart));
    for (int64_t s = 0; s < split; ++s) parts.push_back({i, groups * s / split, groups * (s + 1) / split});
  }
  const Part* list = parts.data();
  auto run = [=](int64_t p) {
    const Product& product = products[list[p].product];
    Int8ProductPart(isa, product.w.format, a, product.w.data, product.w.group_bytes, product.w.n,
                    product.y, list[p].g0, list[p].g1);
  };
  const int64_t n = static_cast<int64_t>(parts.size());
  if (n == 1 || threads <= 1) {
    for (int64_t p = 0; p < n; ++p) run(p);
  } else {
    SpinPool::Get(threads).Run(n, run);
  }
}

// Per-thread scratch that grows as needed (the calling thread's: parts end before a
// handler returns).
float* Scratch(std::vector<float>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(size);
  return buffer.data();
}

constexpr int kMaxProducts = 3;  // products of the same rows in one job

// The products of rows quantized in `passes` passes (a.k = passes * rows; QuantizeActivations)
// with up to kMaxProducts matrices: two passes give 2 * rows partial products per matrix,
// each row's two added into its output.
void RunProducts(int threads, IntIsa isa, const Activations& a, const Product* products,
                 int count, int passes) {
  if (passes == 1) return RunProductsOnce(threads, isa, a, products, count);
  thread_local std::vector<float> partials[kMaxProducts];
  Product both[kMaxProducts];
  for (int i = 0; i < count; ++i) {
    both[i] = {products[i].w, Scratch(partials[i], a.k * products[i].w.n)};
  }
  RunProductsOnce(threads, isa, a, both, count);
  const int64_t rows = a.k / 2;
  for (int i = 0; i < count; ++i) AddSecondPass(both[i].y, rows * products[i].w.n, products[i].y);
}

// Checks the passes attribute of a handler.
std::optional<ffi::Error> CheckPasses(const char* name, int32_t passes) {
  if (passes == 1 || passes == 2) return std::nullopt;
  return ffi::Error::InvalidArgument(std::string(name) + ": passes must be 1 or 2, got " +
                                     std::to_string(passes));
}

// Scratch for k rows of d numbers quantized in `passes` passes (passes * k rows).
Activations Quantized(std::vector<int32_t>& buffer, int64_t k, int64_t d, int passes) {
  const int64_t words = ActivationBuffer::Words(passes * k, d);
  if (static_cast<int64_t>(buffer.size()) < words) buffer.resize(words);
  return ActivationBuffer::Into(buffer.data(), passes * k, d);
}

// The rotary embedding of x [rows, width] in heads of 2 * half numbers (rotate-half), with
// each row's cos, sin [rows, half].
void Rotate(float* x, int64_t rows, int64_t width, int64_t half, const float* cos,
            const float* sin) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (int64_t head = 0; head < width; head += 2 * half) {
      float* first = x + r * width + head;
      float* second = first + half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = first[i], b = second[i];
        first[i] = a * c[i] - b * s[i];
        second[i] = b * c[i] + a * s[i];
      }
    }
  }
}

void AddInto(float* out, const float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

int Threads(ffi::ThreadPool& pool) {
  return static_cast<int>(std::min<int64_t>(pool.num_threads(), kMaxThreads));
}

// Rows per thread from which the work done row by row between the products (norms,
// quantization, rotary, SiLU, residual sums) is shared between the threads: a prefill's
// rows are, a decoding step's few are not (handing them over costs more than they do).
constexpr int64_t kRowsPerThread = 8;

// body(r0, r1) over row ranges that cover rows 0 .. rows - 1, one per thread when there
// are enough rows. Each row's numbers do not depend on the range it falls in.
template <typename Body>
void ForRowRanges(int threads, int64_t rows, const Body& body) {
  const int64_t parts = std::min<int64_t>(threads, rows / kRowsPerThread);
  if (parts <= 1) return body(int64_t{0}, rows);
  SpinPool::Get(threads).Run(parts, [&](int64_t p) {
    body(rows * p / parts, rows * (p + 1) / parts);
  });
}

// h = rmsnorm(x) * scale over rows x [rows, d], split between the threads.
void RmsNormRows(Isa isa, int threads, const float* x, const float* scale, int64_t rows,
                 int64_t d, float eps, float* out) {
  ForRowRanges(threads, rows, [&](int64_t r0, int64_t r1) {
    if (isa == Isa::kAvx512) {
      layer_avx512::RmsNorm(x + r0 * d, scale, r1 - r0, d, eps, out + r0 * d);
    } else {
      layer_avx2::RmsNorm(x + r0 * d, scale, r1 - r0, d, eps, out + r0 * d);
    }
  });
}

// QuantizeActivations of rows x [rows, d], split between the threads.
void QuantizeRowsShared(IntIsa int_isa, int threads, const float* x, int64_t d,
                        const Activations& a, int passes) {
  ForRowRanges(threads, a.k / passes, [&](int64_t r0, int64_t r1) {
    QuantizeActivations(int_isa, x, d, a, passes, r0, r1);
  });
}

ffi::Error Int8Qkv(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> norm,
                   ffi::Buffer<ffi::U8> wq, ffi::Buffer<ffi::U8> wk, ffi::Buffer<ffi::U8> wv,
                   ffi::Buffer<ffi::F32> cos, ffi::Buffer<ffi::F32> sin,
                   ffi::ResultBuffer<ffi::F32> q, ffi::ResultBuffer<ffi::F32> k,
                   ffi::ResultBuffer<ffi::F32> v, float eps, int32_t format_q, int32_t format_k,
                   int32_t format_v, int32_t passes) {
  if (auto error = CheckPasses("int8_qkv", passes)) return *std::move(error);
  const auto xd = x.dimensions();
  const auto cd = cos.dimensions();
  if (xd.size() != 2 || norm.element_count() != xd[1] || cd.size() != 2 || cd[0] != xd[0] ||
      sin.dimensions().size() != 2 || sin.dimensions()[0] != cd[0] ||
      sin.dimensions()[1] != cd[1] || q->dimensions().size() != 2 ||
      k->dimensions().size() != 2 || v->dimensions().size() != 2 ||
      q->dimensions()[1] % (2 * cd[1]) != 0 || k->dimensions()[1] % (2 * cd[1]) != 0 ||
      k->dimensions()[1] != v->dimensions()[1] || q->dimensions()[0] != xd[0] ||
      k->dimensions()[0] != xd[0] || v->dimensions()[0] != xd[0]) {
    return ffi::Error::InvalidArgument(
        "int8_qkv: expected x [R, d], norm [d], cos and sin [R, D / 2], outputs [R, H * D]");
  }
  const int64_t rows = xd[0], d = xd[1], half = cd[1];
  const Isa isa = ActiveKernelIsa();
  if (isa == Isa::kNone || d % 32 != 0) {
    return ffi::Error::InvalidArgument("int8_qkv: needs the kernels and d a multiple of 32");
  }
  Matrix mq, mk, mv;
  for (auto [name, buffer, format, n, out] :
       {std::tuple{"int8_qkv query", &wq, format_q, q->dimensions()[1], &mq},
        std::tuple{"int8_qkv key", &wk, format_k, k->dimensions()[1], &mk},
        std::tuple{"int8_qkv value", &wv, format_v, v->dimensions()[1], &mv}}) {
    if (auto error = MatrixOf(name, *buffer, format, n, d, out)) return *std::move(error);
  }
  thread_local std::vector<float> normed;
  thread_local std::vector<int32_t> quantized;
  float* h = Scratch(normed, rows * d);
  const Activations a = Quantized(quantized, rows, d, passes);
  const IntIsa int_isa = ActiveIntIsa();
  const int threads = Threads(pool);
  RmsNormRows(isa, threads, x.typed_data(), norm.typed_data(), rows, d, eps, h);
  QuantizeRowsShared(int_isa, threads, h, d, a, passes);
  const Product products[] = {{mq, q->typed_data()}, {mk, k->typed_data()}, {mv, v->typed_data()}};
  RunProducts(threads, int_isa, a, products, 3, passes);
  ForRowRanges(threads, rows, [&](int64_t r0, int64_t r1) {
    const float* c = cos.typed_data() + r0 * half;
    const float* s = sin.typed_data() + r0 * half;
    Rotate(q->typed_data() + r0 * mq.n, r1 - r0, mq.n, half, c, s);
    Rotate(k->typed_data() + r0 * mk.n, r1 - r0, mk.n, half, c, s);
  });
  return ffi::Error::Success();
}

ffi::Error Int8AttentionMlp(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                            ffi::Buffer<ffi::F32> queries, ffi::AnyBuffer keys,
                            ffi::AnyBuffer values, ffi::Buffer<ffi::PRED> allowed,
                            ffi::Buffer<ffi::S32> ends, ffi::Buffer<ffi::U8> wo,
                            ffi::Buffer<ffi::F32> norm, ffi::Buffer<ffi::U8> wg,
                            ffi::Buffer<ffi::U8> wu, ffi::Buffer<ffi::U8> wd,
                            ffi::ResultBuffer<ffi::F32> out, float scale, float eps,
                            int32_t format_o, int32_t format_g, int32_t format_u,
                            int32_t format_d, int64_t mlp_dim, int32_t passes) {
  if (auto error = CheckPasses("int8_attention_mlp", passes)) return *std::move(error);
  const auto xd = x.dimensions();
  const auto qd = queries.dimensions();
  const auto kd = keys.dimensions();
  const auto ad = allowed.dimensions();
  const auto ed = ends.dimensions();
  if (xd.size() != 3 || qd.size() != 3 || kd.size() != 4 || ad.size() != 3 || ed.size() != 2 ||
      qd[0] != xd[0] || qd[1] != xd[1] || kd[0] != xd[0] || qd[2] % kd[3] != 0 ||
      (qd[2] / kd[3]) % kd[2] != 0 || ad[0] != xd[0] || ad[1] != xd[1] || ad[2] != kd[1] ||
      ed[0] != xd[0] || ed[1] != xd[1] || norm.element_count() != xd[2] ||
      !std::equal(kd.begin(), kd.end(), values.dimensions().begin(), values.dimensions().end())) {
    return ffi::Error::InvalidArgument(
        "int8_attention_mlp: expected x [B, K, d], queries [B, K, H * D], caches [B, C, KV, D], "
        "allowed [B, K, C], ends [B, K], norm [d]");
  }
  const int64_t batch = xd[0], k = xd[1], d = xd[2], rows = batch * k;
  const int64_t head_dim = kd[3], heads = qd[2] / head_dim, capacity = kd[1];
  const Isa isa = ActiveKernelIsa();
  if (auto error = CheckAttention(isa, head_dim, ends.typed_data(), rows, capacity)) {
    return *std::move(error);
  }
  CacheNumbers numbers;
  if (auto error = CacheNumbersOf(keys.element_type(), values.element_type(), &numbers)) {
    return *std::move(error);
  }
  if (d % 32 != 0 || qd[2] % 32 != 0 || mlp_dim % 32 != 0) {
    return ffi::Error::InvalidArgument(
        "int8_attention_mlp: d, heads * head_dim and mlp_dim must be multiples of 32");
  }
  Matrix mo, mg, mu, md;
  for (auto [name, buffer, format, n, inputs, matrix] :
       {std::tuple{"int8_attention_mlp out", &wo, format_o, d, qd[2], &mo},
        std::tuple{"int8_attention_mlp gate", &wg, format_g, mlp_dim, d, &mg},
        std::tuple{"int8_attention_mlp up", &wu, format_u, mlp_dim, d, &mu},
        std::tuple{"int8_attention_mlp down", &wd, format_d, d, mlp_dim, &md}}) {
    if (auto error = MatrixOf(name, *buffer, format, n, inputs, matrix)) return *std::move(error);
  }
  const int threads = Threads(pool);
  const IntIsa int_isa = ActiveIntIsa();
  thread_local std::vector<float> context_buffer, product_buffer, gate_buffer, up_buffer;
  thread_local std::vector<int32_t> quantized;
  float* context = Scratch(context_buffer, rows * qd[2]);
  float* product = Scratch(product_buffer, rows * std::max(d, qd[2]));
  float* gate = Scratch(gate_buffer, rows * mlp_dim);
  float* up = Scratch(up_buffer, rows * mlp_dim);
  float* y = out->typed_data();
  // x + out(attention)
  CachedAttentionRows(isa, threads, queries.typed_data(), numbers, keys.untyped_data(),
                      values.untyped_data(),
                      allowed.typed_data(), ends.typed_data(), batch, k, heads, kd[2], head_dim,
                      capacity, scale, context);
  Activations a = Quantized(quantized, rows, qd[2], passes);
  QuantizeRowsShared(int_isa, threads, context, qd[2], a, passes);
  const Product out_product[] = {{mo, product}};
  RunProducts(threads, int_isa, a, out_product, 1, passes);
  ForRowRanges(threads, rows, [&](int64_t r0, int64_t r1) {
    AddInto(y + r0 * d, x.typed_data() + r0 * d, product + r0 * d, (r1 - r0) * d);
  });
  // + down(silu(gate(h)) * up(h)), h = rmsnorm(x + attention)
  RmsNormRows(isa, threads, y, norm.typed_data(), rows, d, eps, product);
  a = Quantized(quantized, rows, d, passes);
  QuantizeRowsShared(int_isa, threads, product, d, a, passes);
  const Product mlp_products[] = {{mg, gate}, {mu, up}};
  RunProducts(threads, int_isa, a, mlp_products, 2, passes);
  ForRowRanges(threads, rows, [&](int64_t r0, int64_t r1) {
    const int64_t at = r0 * mlp_dim, count = (r1 - r0) * mlp_dim;
    if (isa == Isa::kAvx512) {
      layer_avx512::SiluTimes(gate + at, up + at, count);
    } else {
      layer_avx2::SiluTimes(gate + at, up + at, count);
    }
  });
  a = Quantized(quantized, rows, mlp_dim, passes);
  QuantizeRowsShared(int_isa, threads, gate, mlp_dim, a, passes);
  const Product down_product[] = {{md, product}};
  RunProducts(threads, int_isa, a, down_product, 1, passes);
  ForRowRanges(threads, rows, [&](int64_t r0, int64_t r1) {
    AddInto(y + r0 * d, y + r0 * d, product + r0 * d, (r1 - r0) * d);
  });
  return ffi::Error::Success();
}

}  // namespace
}  // namespace specsample

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleInt8Qkv, specsample::Int8Qkv,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // x
                                  .Arg<ffi::Buffer<ffi::F32>>()  // norm
                                  .Arg<ffi::Buffer<ffi::U8>>()   // wq
                                  .Arg<ffi::Buffer<ffi::U8>>()   // wk
                                  .Arg<ffi::Buffer<ffi::U8>>()   // wv
                                  .Arg<ffi::Buffer<ffi::F32>>()  // cos
                                  .Arg<ffi::Buffer<ffi::F32>>()  // sin
                                  .Ret<ffi::Buffer<ffi::F32>>()  // q
                                  .Ret<ffi::Buffer<ffi::F32>>()  // k
                                  .Ret<ffi::Buffer<ffi::F32>>()  // v
                                  .Attr<float>("eps")
                                  .Attr<int32_t>("format_q")
                                  .Attr<int32_t>("format_k")
                                  .Attr<int32_t>("format_v")
                                  .Attr<int32_t>("passes"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(SpecsampleInt8AttentionMlp, specsample::Int8AttentionMlp,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // x
                                  .Arg<ffi::Buffer<ffi::F32>>()   // queries
                                  .Arg<ffi::AnyBuffer>()          // keys (f32 or bf16)
                                  .Arg<ffi::AnyBuffer>()          // values (as keys)
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // allowed
                                  .Arg<ffi::Buffer<ffi::S32>>()   // ends
                                  .Arg<ffi::Buffer<ffi::U8>>()    // wo
                                  .Arg<ffi::Buffer<ffi::F32>>()   // norm
                                  .Arg<ffi::Buffer<ffi::U8>>()    // wg
                                  .Arg<ffi::Buffer<ffi::U8>>()    // wu
                                  .Arg<ffi::Buffer<ffi::U8>>()    // wd
                                  .Ret<ffi::Buffer<ffi::F32>>()   // x + attention + MLP
                                  .Attr<float>("scale")
                                  .Attr<float>("eps")
                                  .Attr<int32_t>("format_o")
                                  .Attr<int32_t>("format_g")
                                  .Attr<int32_t>("format_u")
                                  .Attr<int32_t>("format_d")
                                  .Attr<int64_t>("mlp_dim")
                                  .Attr<int32_t>("passes"));
