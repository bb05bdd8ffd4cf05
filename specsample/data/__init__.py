"""Datasets: the offline English->German gettext pairs (and, later, seqio/TFDS tasks)."""
