"""Reconstruction robustness (ReRo): what differential privacy guarantees against any
reconstruction attack, beside what the attacks achieve.

The game (Balle, Cherubin and Hayes, S&P 2022; Hayes, Mahloujifar and Balle, NeurIPS 2023,
arXiv 2302.07225): a target z is drawn from a prior π, the mechanism M trains on D₋ ∪ {z}
(D₋ fixed, known to the adversary or not), the adversary sees M's output and answers ẑ;
it succeeds when ρ(ẑ, z) holds (here: SSIM(ẑ, z) ≥ a level, trdr's criterion). Its
baseline κ = sup_ẑ P_{z∼π}[ρ(ẑ, z)] is the best success of an adversary who does not see
M at all.

* `gdp_bound`: if M is μ-GDP (add or remove one point), every adversary's success is at
  most Φ(Φ⁻¹(κ) + μ). Kaissis, Hayes, Ziller and Rueckert (arXiv 2307.03928) show that
  an f-DP mechanism has ReRo ≤ 1 − f(κ); for μ-GDP, f(α) = Φ(Φ⁻¹(1 − α) − μ) (Dong, Roth
  and Su), whence the closed form; Hayes et al. obtain the same for the Gaussian mechanism
  from its blow-up function. μ = 0 gives κ (the output says nothing), μ → ∞ gives 1.
* `profile_bound`: for any mechanism with privacy profile δ(ε) (e.g. Poisson-subsampled
  DP-SGD, from `trdr.victim.accounting.privacy_profile`): 1 − f(κ) ≤ min_ε min(δ(ε) +
  e^ε κ, 1 − e^{−ε}(1 − δ(ε) − κ)), since every (ε, δ(ε)) pair holds and f ≥ the
  trade-off of each (Dong, Roth and Su, Prop. 2.12); the first term is the (ε, δ) ReRo
  bound e^ε κ + δ of Balle et al. and Hayes et al. On μ-GDP's profile its minimum over all
  ε ≥ 0 is `gdp_bound` (tests/test_dp.py).
* `baseline`: κ estimated from images of the prior (`Baseline`).
* `guesses_baseline`: an adversary that answers m images and succeeds when any meets the
  criterion has baseline κ_m ≤ min(1, m κ) (the union bound); the bound then uses κ_m.
* `exceeds`: whether a measured success count lies above a bound beyond its sampling
  error (the Clopper–Pearson interval).
"""

from typing import NamedTuple

import numpy as np
import scipy.stats
from scipy import special

from trdr.evaluation import ssim


def _kappa(kappa) -> np.ndarray:
  k = np.asarray(kappa, np.float64)
  if np.any(~np.isfinite(k)) or np.any(k < 0) or np.any(k > 1):
    raise ValueError(f"kappa must be a probability in [0, 1], got {kappa!r}")
  return k


def gdp_bound(kappa, mu) -> np.ndarray:
  """Φ(Φ⁻¹(κ) + μ): the success probability no reconstruction adversary exceeds against a
  μ-GDP mechanism (Kaissis et al. 2023, arXiv 2307.03928: ReRo ≤ 1 − f(κ) for f-DP, here
  f = G_μ; Hayes et al. 2023, arXiv 2302.07225, for the Gaussian mechanism).

  Args:
    kappa: float or float[...], the baseline κ in [0, 1].
    mu: float or float[...] ≥ 0 (inf allowed: no privacy), broadcast with ``kappa``.
  Returns:
    float64[...] in [κ, 1]: κ at μ = 0, 1 at μ = inf (and at κ = 1); 0 at κ = 0 for a
    finite μ.
  Raises:
    ValueError: κ outside [0, 1] or μ negative or NaN.
  """
  k = _kappa(kappa)
  m = np.asarray(mu, np.float64)
  if np.any(np.isnan(m)) or np.any(m < 0):
    raise ValueError(f"mu must be ≥ 0 (inf: no privacy), got {mu!r}")
  with np.errstate(invalid="ignore"):   # Φ⁻¹(0) + inf: the κ = 0, μ = inf corner
    out = special.ndtr(special.ndtri(k) + m)
  return np.where(np.isinf(m), 1.0, np.where(k == 0, 0.0, out))


def profile_bound(kappa, epsilons, deltas) -> np.ndarray:
  """min over the given ε of min(1, δ(ε) + e^ε κ, 1 − e^{−ε}(1 − δ(ε) − κ)): the ReRo bound
  of a mechanism that is (ε, δ(ε))-DP at each ε given (the module docstring; each ε
  alone gives a valid bound, so any grid does, the finer the tighter).

  Args:
    kappa: float or float[...] in [0, 1].
    epsilons: float[K] ≥ 0; deltas: float[K] in [0, 1], δ(ε) at each.
  Returns:
    float64[...] in [κ, 1] (the shape of ``kappa``).
  Raises:
    ValueError: κ out of range, or ε / δ not 1-D of one length with ε ≥ 0 and δ in [0, 1].
  """
  k = _kappa(kappa)
  eps, dlt = np.asarray(epsilons, np.float64), np.asarray(deltas, np.float64)
  if eps.ndim != 1 or eps.shape != dlt.shape or eps.size == 0:
    raise ValueError(f"epsilons and deltas must be 1-D of one length, got shapes "
                     f"{eps.shape} and {dlt.shape}")
  if np.any(~np.isfinite(eps)) or np.any(eps < 0) or np.any(dlt < 0) or np.any(dlt > 1):
    raise ValueError("epsilons must be finite and ≥ 0, deltas in [0, 1]")
  kk = k[..., None]
  first = dlt + np.exp(eps) * kk
  second = 1.0 - np.exp(-eps) * (1.0 - dlt - kk)
  return np.clip(np.minimum(first, second).min(axis=-1), k, 1.0)


def guesses_baseline(kappa, m: int) -> np.ndarray:
  """κ_m ≤ min(1, m κ): the baseline of an adversary answering m images, successful when
  any of them meets the criterion (union bound over its answers).

  Raises:
    ValueError: m < 1 or κ out of range.
  """
  if int(m) != m or m < 1:
    raise ValueError(f"m (answers per target) must be an integer ≥ 1, got {m}")
  return np.minimum(1.0, int(m) * _kappa(kappa))


class Baseline(NamedTuple):
  """κ estimated from a sample of the prior (`baseline`).

  Attributes:
    kappa: the best guess's fraction of prior images meeting the criterion, in [0, 1].
    count, trials: that fraction's numerator and denominator.
    upper: its one-sided Clopper–Pearson upper limit at ``confidence``.
    guess: the best guess: the index of a prior image, or -1 for the sample's mean image.
    mean_pairwise: the mean over ordered pairs (i ≠ j) of the criterion: the success of an
      adversary guessing a random draw from the prior (≤ kappa).
  """
  kappa: float
  count: int
  trials: int
  upper: float
  guess: int
  mean_pairwise: float


def baseline(prior, level: float = 0.4, window: int = ssim.FILTER_SIZE,
             confidence: float = 0.95) -> Baseline:
  """κ = sup_ẑ P_{z∼π}[SSIM(ẑ, z) ≥ level], estimated on a sample of π: the supremum taken
  over the guesses ẑ ∈ {each sample image, the sample's mean image}, the probability over
  the other sample images (leave one out: a guess is never scored against itself).

  The supremum over a finite set of guesses underestimates κ (a better guess may exist)
  and the maximum over many noisy fractions overestimates it; ``upper`` adds the sampling
  error of the best guess's fraction.

  Args:
    prior: float[N, H, W, C] pixels in [0, 1], N ≥ 2: images drawn from the prior (e.g. the
      test split of the target's class).
    level: the SSIM level of the success criterion, in (−1, 1].
    window: SSIM's window side (odd; `trdr.evaluation.ssim.ssim`).
    confidence: of ``upper``, in (0, 1).
  Returns:
    A `Baseline`.
  Raises:
    ValueError: fewer than 2 images, pixels outside [0, 1], a level outside (−1, 1] or a
      confidence outside (0, 1) (and as `trdr.evaluation.ssim.pairwise_ssim`).
  """
  x = np.asarray(prior, np.float32)
  if x.ndim != 4 or x.shape[0] < 2:
    raise ValueError(f"prior must be float[N ≥ 2, H, W, C], got shape {x.shape}")
  if np.any(~np.isfinite(x)) or x.min() < 0 or x.max() > 1:
    raise ValueError("prior images must be pixels in [0, 1]")
  if not -1 < level <= 1:
    raise ValueError(f"level must be in (−1, 1], got {level}")
  if not 0 < confidence < 1:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  n = x.shape[0]
  hits = np.asarray(ssim.pairwise_ssim(x, x, filter_size=window)) >= level
  np.fill_diagonal(hits, False)
  counts = hits.sum(axis=1)
  mean_hits = int((np.asarray(ssim.pairwise_ssim(x.mean(axis=0), x, filter_size=window))
                   >= level).sum())
  best = int(np.argmax(counts))
  # The mean image against all n, the sample images against the n − 1 others.
  if mean_hits / n > counts[best] / (n - 1):
    count, trials, guess = mean_hits, n, -1
  else:
    count, trials, guess = int(counts[best]), n - 1, best
  upper = 1.0 if count == trials else float(
      scipy.stats.beta.ppf(confidence, count + 1, trials - count))
  return Baseline(count / trials, count, trials, upper, guess,
                  float(hits.sum() / (n * (n - 1))))


def confidence_interval(successes: int, trials: int, confidence: float = 0.95
                        ) -> tuple[float, float]:
  """The two-sided Clopper–Pearson interval of a success probability.

  Raises:
    ValueError: trials < 1, successes outside [0, trials], confidence outside (0, 1).
  """
  if trials < 1 or not 0 <= successes <= trials:
    raise ValueError(f"need 0 ≤ successes ≤ trials, trials ≥ 1; got {successes}, {trials}")
  if not 0 < confidence < 1:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}")
  ci = scipy.stats.binomtest(int(successes), int(trials)).proportion_ci(confidence, "exact")
  return float(ci.low), float(ci.high)


def exceeds(successes: int, trials: int, bound: float, confidence: float = 0.95) -> bool:
  """Whether ``successes`` of ``trials`` lie above ``bound`` beyond sampling error: the
  one-sided Clopper–Pearson lower limit at ``confidence`` is above it (a success
  probability ≤ bound gives True with probability ≤ 1 − confidence, for independent
  trials).

  Raises:
    ValueError: as `confidence_interval`, a bound outside [0, 1] or a confidence outside
      (0.5, 1).
  """
  if not 0 <= bound <= 1:
    raise ValueError(f"bound must be in [0, 1], got {bound}")
  if not 0.5 < confidence < 1:
    raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
  low, _ = confidence_interval(successes, trials, 2 * confidence - 1)
  return low > bound
