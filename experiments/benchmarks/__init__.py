"""The sections of experiments/benchmark.py, one module each, and their shared pieces."""
