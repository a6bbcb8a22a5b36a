r"""Figs. 5–12 of Runkel et al. 2024: DecoReco runs and the two energy landscapes.

Command:
  make fig5 fig6 fig7 fig8 fig9 fig10 fig11 fig12   # ":cpu", runs/report_cpu/decoreco_figures
  make fig5 ... SIZE=paper                                   # "", one GPU
  python experiments/paper.py --config=configs/report.py:cpu --workdir=runs/report_cpu \
      --artefacts=fig5,fig8

Sections: decoreco (configs/decoreco_cifar.py, same variant), landscape
(configs/decoreco_landscape.py), bilevel (configs/bilevel_affine.py, "smoke" for :smoke):
see `trdr.report.artefacts` for which run feeds which figure. The sweep runs first (from
the published reference settings, `sweep.include`); its best.json sets (σ, lr, λ_min, α)
of the tuned, partition and landscape runs, and (lr, λ_min, α) of Fig. 5's untuned run
(σ = 1). The victim has a bias in every layer, as Runkel et al.'s.

Expected runtime: ":cpu" about 12 minutes on a 2-core CPU; ":smoke" about 1.5 minutes.
"""

import ml_collections

from trdr.configs import bilevel_affine, decoreco_cifar, decoreco_landscape, sizes


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  variant = sizes.variant(arg)
  config = ml_collections.ConfigDict()
  config.decoreco = decoreco_cifar.get_config(variant)
  config.landscape = decoreco_landscape.get_config(variant)
  # Runkel et al. Sec. 4.4: "a three linear layer neural network with bias terms" (Haim et
  # al.'s MLP has a bias in the first layer only, decoreco_cifar.py's default). In float32,
  # the precision of Haim et al.'s PyTorch reference (and of the membership experiment's
  # DecoReco runs): float64 costs more per iteration on a CPU (`make
  # benchmark-decoreco-cpu` measures both side by side). ":smoke" keeps float64: its float32
  # tuned run (n = 10) ends nearest only 4 distinct training images, too few for Fig. 7's
  # quiz, and the smoke report would stop there.
  for c in (config.decoreco, config.landscape):
    c.victim.all_biases = True
    c.float64 = variant == "smoke"
  config.bilevel = bilevel_affine.get_config("smoke" if variant == "smoke" else None)
  if variant == "cpu":
    # Fig. 10(a) on the same n as Fig. 10(b)'s DecoReco landscape (n = 100), not the main
    # job's n = 500: the two panels then attack training sets of one size.
    config.bilevel.data.n_per_class = config.landscape.data.n_per_class
  if variant != "smoke":
    # Runkel et al.'s lower level, θ0 ~ U(0, 1) at every outer step, as for Figs. 1–4
    # (paper_figures.py; about three times the warm-started attack's time). ":smoke" keeps
    # the main job's smoke config (the warm start): the notebook and the distributed test
    # rerun exactly this run.
    bilevel_affine.paper_lower_level(config.bilevel.attack)
  config.n_show = 8 if variant == "smoke" else 32
  return config
