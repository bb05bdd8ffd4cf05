// What greedy drafting reads of a row of logits, for one instruction set. No include guard:
// included inside a namespace per instruction set after that namespace defines Vec
// (Lanes<L>), the macro SPECSAMPLE_SIMD and exp_simd.h's Exp.

// The lowest index i < n with y[i] == m (m one of y's numbers).
SPECSAMPLE_SIMD inline int64_t FirstIndexOf(const float* y, int64_t n, float m) {
  constexpr int L = Vec::kLanes;
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const int lane = Vec::FirstEqual(Vec::Load(y + i), m);
    if (lane >= 0) return i + lane;
  }
  for (; i < n; ++i) {
    if (y[i] == m) return i;
  }
  return n - 1;
}

// For logits y [n] (core.sampling's definitions, on one row, nothing depending on other
// rows): best = max y; token = the lowest index holding it; top = 1 / sum_i exp(y_i - best)
// (L lanes: element i into lane i % L, in order, then the lanes by Vec::Sum's fixed tree).
// A row with a NaN has best NaN, token n - 1 and top NaN; where best is +inf or -inf (every
// logit -inf) top is NaN too: the caller flags such rows (best not finite).
SPECSAMPLE_SIMD inline void GreedySummary(const float* y, int64_t n, int32_t* token, float* best,
                                          float* top) {
  constexpr int L = Vec::kLanes;
  const int64_t whole = n / L * L;
  typename Vec::V maxima = Vec::Broadcast(-std::numeric_limits<float>::infinity());
  bool nan = false;
  for (int64_t i = 0; i < whole; i += L) {
    const typename Vec::V v = Vec::Load(y + i);
    nan |= Vec::AnyNan(v);
    maxima = Vec::Max(maxima, v);
  }
  float m = Vec::MaxOf(maxima);
  for (int64_t i = whole; i < n; ++i) {
    nan |= std::isnan(y[i]);
    m = std::max(m, y[i]);
  }
  if (nan) {
    *token = static_cast<int32_t>(n - 1);
    *best = *top = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  *best = m;
  *token = static_cast<int32_t>(FirstIndexOf(y, n, m));
  if (!std::isfinite(m)) {
    *top = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  // Within 5e-8 of float64's on the SmolLM2 draft's 8,192 kept logits
  // (tests/test_int8_blocks.py allows 2e-6).
  const typename Vec::V shift = Vec::Broadcast(m);
  typename Vec::V sums = Vec::Zero();
  for (int64_t i = 0; i < n; i += L) {
    const typename Vec::Mask lanes = Vec::Tail(n - i);
    const typename Vec::V e = Exp(Vec::Sub(Vec::Load(y + i, lanes), shift));
    sums = Vec::Add(sums, Vec::Select(lanes, e, Vec::Zero()));
  }
  *top = 1.0f / Vec::Sum(sums);
}
