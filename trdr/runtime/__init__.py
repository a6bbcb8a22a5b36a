"""What every stage runs on and knows nothing of the pipeline.

  files        atomic writes, strict JSON, checksummed msgpack, npz
  rundir       the run directory: its lock, config.json, metrics.jsonl, checkpoints and
               the finished marker (SHA256SUMS) that a reused run is verified against
  sharding     a grid of independent points mapped over devices (`grid_map`)
  distributed  one grid across processes (`jax.distributed`)
"""
