"""Checkpoint file formats as pure readers: GGUF (`gguf`), safetensors and config.json
(`safetensors`). What the tensors mean is the architectures' business
(`specsample.checkpoints.architectures`); T5X checkpoints are read by `checkpoints.t5x`."""
