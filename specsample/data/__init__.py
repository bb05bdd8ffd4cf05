"""Datasets: seqio tasks (WMT EnDe, CNN/DM, local files) and the offline sources.

- `specs`: what each eval task reads and how T5 preprocesses it (no TensorFlow needed);
- `tasks`: seqio Tasks from those specs over TFDS or local TSV/JSONL/TFRecord files;
- `gettext_pairs`: English->German message pairs from the system's gettext catalogs;
- `docstrings`: Python function source -> first docstring sentence, from the stdlib;
- `chat_prompts`: chat prompts over the offline text, with the generated task families of
  `task_families` (math, reasoning, roleplay, writing, STEM, humanities, extraction, RAG).
"""
