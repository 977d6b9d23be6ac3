"""Reproducible measurements behind tuned constants; each module runs as `python -m evals.<name>`.

Third-party evaluation data is read from `../shared/evaldata/` (override with `EVALDATA_DIR`) and
never copied into this repository (see its README for the licenses).
"""
