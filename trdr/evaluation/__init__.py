"""How much a reconstruction reveals: the same evaluation for every attack (no plotting).

  ssim      SSIM (dm-pix's) and its exact all-pairs engine: every (query, candidate)
            pair, mixtures of base images, and the SSIM-nearest neighbours
  metrics   L2 distances and the nearest L2; Haim et al.'s NCC distance, best buddies,
            matched score and min-max view
  evaluate  a run's evaluation: nearest neighbours in every comparison set, per-training-
            image counts, the start images' twins (the baseline), ||θ* − θ(x)||², the
            Fig. 9 trace
  records   landscape.json's records and summary counts from those numbers
  roc       ROC AUC with its bootstrap CI, TPR at low FPR (membership statistics)
  realism   the Sec. 4.4 quiz and rank statistics of realism scores
  rero      reconstruction robustness: the bound DP puts on any attack's success
            (Φ(Φ⁻¹(κ) + μ) for μ-GDP; from a privacy profile otherwise), the prior's
            baseline κ from images, and whether a measured success exceeds a bound
  power     the attack's measured power at the nearest calibrated cell (`make power`'s
            table, shipped in trdr/assets), and the premise warning's threshold rule
"""
