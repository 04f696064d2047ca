"""Language models learning CURI concepts in context, through lm-evaluation-harness: the task
export (`curi.models.lm.export`), the task folder's functions (`curi.models.lm.task`), the
Bayesian oracle as an lm-eval model (`curi.models.lm.oracle_lm`, which alone imports lm_eval)
and the comparison with the oracles (`curi.models.lm.compare`). See docs/lm.md."""
