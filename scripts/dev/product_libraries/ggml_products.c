// All the weight products of one SmolLM2-135M token in ggml (llama.cpp's tensor library),
// k rows each, timed on ggml's CPU backend: the ggml side of
// scripts/dev/measure_product_libraries.py, which builds and runs this file.
//
//   ggml_products TYPE THREADS REPEATS K...   (TYPE: f32 bf16 f16 q8_0 q4_0 q4_1)
//
// 30 layers x 7 projections (q 576x576, k 576x192, v 576x192, o 576x576, gate and up
// 576x1536, down 1536x576; distinct weights per layer, so they stream from memory) and
// the tied output layer 576x49152 (Q8_0 when TYPE is q4_1 or q4_0, as in SmolLM2's GGUF
// files). Random weights quantized by ggml itself. One graph per k holds all 211
// products; each repeat times every k once (interleaved). Prints one JSON object.
// ggml multiplies quantized weights with activations it quantizes itself (Q8_0 / Q8_1
// blocks, or bfloat16 / float16 for those weight types): its numerics differ from a
// float32 product of the dequantized weights.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

enum { LAYERS = 30, D = 576, KV = 192, FF = 1536, VOCAB = 49152, MAX_K = 64 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float uniform(void) {  // xorshift64*: deterministic, uniform in [-1, 1)
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// A weight tensor [in, out] (ggml's ne0 = in) of `type` with random values * 0.05.
static struct ggml_tensor *weight(struct ggml_context *ctx, enum ggml_type type, int in, int out,
                                  float *scratch) {
  struct ggml_tensor *w = ggml_new_tensor_2d(ctx, type, in, out);
  const int64_t n = (int64_t)in * out;
  for (int64_t i = 0; i < n; ++i) scratch[i] = 0.05f * uniform();
  if (type == GGML_TYPE_F32) {
    memcpy(w->data, scratch, n * sizeof(float));
  } else if (type == GGML_TYPE_BF16) {
    ggml_fp32_to_bf16_row(scratch, (ggml_bf16_t *)w->data, n);
  } else if (type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(scratch, (ggml_fp16_t *)w->data, n);
  } else {
    ggml_quantize_chunk(type, scratch, w->data, 0, out, in, NULL);
  }
  return w;
}

static int compare(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s TYPE THREADS REPEATS K...\n", argv[0]);
    return 2;
  }
  const char *name = argv[1];
  enum ggml_type type, out_type;
  if (!strcmp(name, "f32")) type = GGML_TYPE_F32;
  else if (!strcmp(name, "bf16")) type = GGML_TYPE_BF16;
  else if (!strcmp(name, "f16")) type = GGML_TYPE_F16;
  else if (!strcmp(name, "q8_0")) type = GGML_TYPE_Q8_0;
  else if (!strcmp(name, "q4_0")) type = GGML_TYPE_Q4_0;
  else if (!strcmp(name, "q4_1")) type = GGML_TYPE_Q4_1;
  else {
    fprintf(stderr, "unknown type %s\n", name);
    return 2;
  }
  out_type = (type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1) ? GGML_TYPE_Q8_0 : type;
  const int threads = atoi(argv[2]), repeats = atoi(argv[3]), num_k = argc - 4;
  int ks[16];
  if (num_k > 16) return 2;
  for (int i = 0; i < num_k; ++i) {
    ks[i] = atoi(argv[4 + i]);
    if (ks[i] < 1 || ks[i] > MAX_K) return 2;
  }
  ggml_cpu_init();

  const int64_t layer_weights = 2LL * D * D + 2LL * D * KV + 3LL * D * FF;
  const size_t weight_bytes =
      LAYERS * layer_weights * sizeof(float) + (size_t)VOCAB * D * sizeof(float);
  struct ggml_init_params params = {weight_bytes + (256u << 20), NULL, false};
  struct ggml_context *ctx = ggml_init(params);
  if (!ctx) return 1;
  float *scratch = malloc((size_t)VOCAB * D * sizeof(float));
  const int shapes[7][2] = {{D, D}, {D, KV}, {D, KV}, {D, D}, {D, FF}, {D, FF}, {FF, D}};
  struct ggml_tensor *weights[LAYERS * 7 + 1];
  size_t stored = 0;
  for (int l = 0; l < LAYERS; ++l)
    for (int j = 0; j < 7; ++j) {
      weights[l * 7 + j] = weight(ctx, type, shapes[j][0], shapes[j][1], scratch);
      stored += ggml_nbytes(weights[l * 7 + j]);
    }
  weights[LAYERS * 7] = weight(ctx, out_type, D, VOCAB, scratch);
  stored += ggml_nbytes(weights[LAYERS * 7]);

  struct ggml_cgraph *graphs[16];
  for (int i = 0; i < num_k; ++i) {
    struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, ks[i]);
    struct ggml_tensor *h = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, FF, ks[i]);
    float *xd = x->data, *hd = h->data;
    for (int64_t n = 0; n < (int64_t)D * ks[i]; ++n) xd[n] = uniform();
    for (int64_t n = 0; n < (int64_t)FF * ks[i]; ++n) hd[n] = uniform();
    graphs[i] = ggml_new_graph_custom(ctx, 512, false);
    for (int w = 0; w <= LAYERS * 7; ++w) {
      struct ggml_tensor *in = (w < LAYERS * 7 && w % 7 == 6) ? h : x;
      ggml_build_forward_expand(graphs[i], ggml_mul_mat(ctx, weights[w], in));
    }
  }
  free(scratch);

  double *times = malloc(sizeof(double) * num_k * repeats);
  for (int i = 0; i < num_k; ++i) ggml_graph_compute_with_ctx(ctx, graphs[i], threads);  // warm
  for (int r = 0; r < repeats; ++r)
    for (int i = 0; i < num_k; ++i) {
      double start = now_ms();
      if (ggml_graph_compute_with_ctx(ctx, graphs[i], threads) != GGML_STATUS_SUCCESS) return 1;
      times[i * repeats + r] = now_ms() - start;
    }
  printf("{\"type\": \"%s\", \"output_type\": \"%s\", \"threads\": %d, \"stored_bytes\": %zu, "
         "\"ms\": {",
         name, ggml_type_name(out_type), threads, stored);
  for (int i = 0; i < num_k; ++i) {
    qsort(times + i * repeats, repeats, sizeof(double), compare);
    printf("%s\"%d\": %.4f", i ? ", " : "", ks[i], times[i * repeats + repeats / 2]);
  }
  printf("}}\n");
  ggml_free(ctx);
  free(times);
  return 0;
}
