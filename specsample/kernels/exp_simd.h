// exp(x) for one instruction set. No include guard: included inside a namespace per
// instruction set (by attention_simd.h, greedy_summary_simd.h) after that namespace defines
// Vec (Lanes<L>) and the macro SPECSAMPLE_SIMD (the function's target).

// exp(x) for x <= 0 (scores minus their maximum): 2^n * e^r with n = round(x / ln 2),
// r = x - n ln 2 (ln 2 in two parts), e^r by a degree-7 polynomial (Horner, no fused
// multiply-add: the same rounding everywhere). exp(0) = 1 exactly; below -87 it is 0.
SPECSAMPLE_SIMD __attribute__((always_inline)) inline typename Vec::V Exp(typename Vec::V x) {
  using V = typename Vec::V;
  const V clamped = Vec::Max(x, Vec::Broadcast(-87.0f));
  const V n = Vec::Round(Vec::Mul(clamped, Vec::Broadcast(1.44269504088896341f)));
  V r = Vec::Sub(clamped, Vec::Mul(n, Vec::Broadcast(0.693359375f)));
  r = Vec::Sub(r, Vec::Mul(n, Vec::Broadcast(-2.12194440e-4f)));
  V p = Vec::Broadcast(1.0f / 5040.0f);
  p = Vec::Add(Vec::Mul(p, r), Vec::Broadcast(1.0f / 720.0f));
  p = Vec::Add(Vec::Mul(p, r), Vec::Broadcast(1.0f / 120.0f));
  p = Vec::Add(Vec::Mul(p, r), Vec::Broadcast(1.0f / 24.0f));
  p = Vec::Add(Vec::Mul(p, r), Vec::Broadcast(1.0f / 6.0f));
  p = Vec::Add(Vec::Mul(p, r), Vec::Broadcast(0.5f));
  p = Vec::Add(Vec::Mul(p, r), Vec::Broadcast(1.0f));
  p = Vec::Add(Vec::Mul(p, r), Vec::Broadcast(1.0f));
  const V e = Vec::Mul(p, Vec::Pow2(n));
  return Vec::Select(Vec::Less(x, Vec::Broadcast(-87.0f)), Vec::Zero(), e);
}
