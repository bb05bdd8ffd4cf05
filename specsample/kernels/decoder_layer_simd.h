// The float steps of a decoder layer for one instruction set (decoder_layer.cc). No
// include guard: included inside namespace specsample::layer_<isa> after Vec, the macro
// SPECSAMPLE_SIMD and attention_simd.h (for Exp).

// out [rows, d] = (x * (1 / sqrt(mean(x^2) + eps))) * scale, each row on its own: the squares
// summed in L lanes over the row in order, then the lanes by a fixed tree (d a multiple of L).
SPECSAMPLE_SIMD inline void RmsNorm(const float* x, const float* scale, int64_t rows, int64_t d,
                                    float eps, float* out) {
  constexpr int L = Vec::kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * d;
    typename Vec::V squares = Vec::Zero();
    for (int64_t i = 0; i < d; i += L) {
      const typename Vec::V v = Vec::Load(row + i);
      squares = Vec::MulAdd(v, v, squares);
    }
    const float inverse = 1.0f / std::sqrt(Vec::Sum(squares) / static_cast<float>(d) + eps);
    const typename Vec::V iv = Vec::Broadcast(inverse);
    for (int64_t i = 0; i < d; i += L) {
      Vec::Store(out + r * d + i, Vec::Mul(Vec::Mul(Vec::Load(row + i), iv), Vec::Load(scale + i)));
    }
  }
}

// gate[i] = (g * sigmoid(g)) * up[i], in place; sigmoid(g) = 1 / (1 + e) for g >= 0 and
// e / (1 + e) below, e = exp(-|g|) (n a multiple of L).
SPECSAMPLE_SIMD inline void SiluTimes(float* gate, const float* up, int64_t n) {
  constexpr int L = Vec::kLanes;
  const typename Vec::V one = Vec::Broadcast(1.0f);
  const typename Vec::V zero = Vec::Zero();
  for (int64_t i = 0; i < n; i += L) {
    const typename Vec::V g = Vec::Load(gate + i);
    const typename Vec::V negative_magnitude = Vec::Sub(zero, Vec::Max(g, Vec::Sub(zero, g)));
    const typename Vec::V e = Exp(negative_magnitude);
    const typename Vec::V sigmoid =
        Vec::Select(Vec::Less(g, zero), Vec::Div(e, Vec::Add(one, e)), Vec::Div(one, Vec::Add(one, e)));
    Vec::Store(gate + i, Vec::Mul(Vec::Mul(g, sigmoid), Vec::Load(up + i)));
  }
}
