"""Evaluation: the Table 2 pipeline and the bundled pair's metrics.

- `configs`: eval configs (ml_collections) -> checked `Pipeline` (no weights needed);
- `runner.run_eval`: target alone vs speculative over a seqio task, resumable;
- `store`: the per-example results file (resume, repair, checkpoint fingerprints);
- `errors`: ConfigError and the scripts' one-line failures and exit codes;
- `report`: quality, alpha, c, r, predicted / measured speedup, the paper's row;
- `metrics`: BLEU (sacrebleu) and ROUGE (rouge-score) as T5 reports them;
- `paper`: Table 2 of Leviathan et al. 2023;
- `translation`: BLEU / alpha / c of the bundled translation pair (its model card).
"""
