"""Privacy accounting of the DP-SGD victims (`trdr.victim.dp_sgd`): ε at δ, and μ of GDP.

The mechanism is T steps of the Gaussian mechanism on the sum of per-example gradients
clipped to norm C, with noise N(0, σ²C² I), each step on all n training points (full
batch, sampling rate q = 1) or on a Poisson sample of rate q < 1. Neighbouring training
sets differ by adding or removing one point (the denominator of the mean gradient is the
public n, or q·n, so one point moves the noisy sum by at most C).

* `epsilon`: ε at δ by the privacy-loss-distribution (PLD) accountant of Google's
  `dp-accounting` package (Meiser & Mohammadi, CCS 2018; Koskela et al., AISTATS 2020):
  pessimistic, each privacy loss rounded up to a multiple of its discretisation interval.
* `gdp_mu`: full batch, the mechanism is μ-GDP with μ = √T/σ exactly (Dong, Roth and Su,
  "Gaussian Differential Privacy", JRSS-B 2022 (arXiv 1905.02383), Thm. 2.7 for one step,
  Cor. 3.3 for the composition); `gdp_delta` is its privacy profile (their Cor. 2.13).
* `noise_multiplier`: σ calibrated to a target ε at δ (closed form for full batch,
  `dp_accounting.calibrate_dp_mechanism` for a subsampled recipe); `gdp_mu_for_epsilon`
  the μ of μ-GDP at a given (ε, δ).
* `privacy_profile`: δ(ε) on a grid of ε by the PLD accountant: what the reconstruction
  bound of a subsampled mechanism is computed from (`trdr.evaluation.rero.profile_bound`).

`dp-accounting` is an optional dependency (``pip install -e ".[dp]"``); it is imported
when a function here first needs it.
"""

import dataclasses
import functools
import math

import ml_collections
import numpy as np
from scipy import optimize, special

# The PLD accountant's discretisation of the privacy loss (its default): ε is
# overestimated by at most this much (tests/test_dp.py argues the bound).
DISCRETIZATION = 1e-4


@dataclasses.dataclass(frozen=True)
class DPSettings:
  """The DP-SGD recipe of a victim (``victim.dp`` of a config; `settings` builds it).

  Attributes:
    noise_multiplier: σ ≥ 0; the noise added to the clipped sum is N(0, σ²C² I).
    clip_norm: C > 0, the bound on each example's gradient norm (over all of θ); None: no
      clipping (then no finite ε: the sensitivity is unbounded).
    steps: T ≥ 1 gradient steps.
    lr: the step size η > 0.
    sampling_rate: q in (0, 1]; 1 is full-batch DP-GD, q < 1 Poisson-subsampled DP-SGD.
    delta: δ in (0, 1) at which ε is reported.
  """
  noise_multiplier: float
  clip_norm: float | None
  steps: int
  lr: float
  sampling_rate: float = 1.0
  delta: float = 1e-5

  def __post_init__(self):
    problems = []
    if not (np.isfinite(self.noise_multiplier) and self.noise_multiplier >= 0):
      problems.append(f"noise_multiplier must be a finite number ≥ 0, got {self.noise_multiplier}")
    if self.clip_norm is not None and not (np.isfinite(self.clip_norm) and self.clip_norm > 0):
      problems.append(f"clip_norm must be > 0 or None (no clipping), got {self.clip_norm}")
    if int(self.steps) != self.steps or self.steps < 1:
      problems.append(f"steps must be an integer ≥ 1, got {self.steps}")
    if not (np.isfinite(self.lr) and self.lr > 0):
      problems.append(f"lr must be > 0, got {self.lr}")
    if not 0 < self.sampling_rate <= 1:
      problems.append(f"sampling_rate must be in (0, 1], got {self.sampling_rate}")
    if not 0 < self.delta < 1:
      problems.append(f"delta must be in (0, 1), got {self.delta}")
    if problems:
      raise ValueError("victim.dp: " + "; ".join(problems))

  @property
  def private(self) -> bool:
    """Whether the recipe has a finite ε: noise and clipping."""
    return self.noise_multiplier > 0 and self.clip_norm is not None


FIELDS = tuple(f.name for f in dataclasses.fields(DPSettings))


def settings(victim_config: ml_collections.ConfigDict) -> DPSettings | None:
  """The victim's DP-SGD recipe, or None for a non-private victim (``victim.dp`` absent or
  None: every config but the DP study's has none).

  Raises:
    ValueError: ``victim.dp`` has an unknown or missing field or a value out of range
      (`DPSettings`), or the victim also reads θ* from a file (``victim.load``).
  """
  dp = victim_config.get("dp")
  if dp is None:
    return None
  given = dict(dp.items() if hasattr(dp, "items") else dp)
  unknown = sorted(set(given) - set(FIELDS))
  missing = sorted({"noise_multiplier", "clip_norm", "steps", "lr"} - set(given))
  if unknown or missing:
    raise ValueError(f"victim.dp: unknown fields {unknown}, missing fields {missing}; "
                     f"known: {list(FIELDS)}")
  if victim_config.get("load"):
    raise ValueError(f"victim.dp trains θ* with DP-SGD but victim.load reads it from "
                     f"{victim_config.load}: set one of them")
  clip = given["clip_norm"]
  return DPSettings(**{**given, "noise_multiplier": float(given["noise_multiplier"]),
                       "clip_norm": None if clip is None else float(clip),
                       "steps": given["steps"], "lr": float(given["lr"])})


def _dp_accounting():
  try:
    import dp_accounting  # noqa: PLC0415  (an optional dependency)
    from dp_accounting.pld import pld_privacy_accountant  # noqa: PLC0415
  except ImportError as e:
    raise ImportError("privacy accounting needs the dp-accounting package: "
                      "pip install -e \".[dp]\"") from e
  return dp_accounting, pld_privacy_accountant


def _event(noise_multiplier: float, steps: int, sampling_rate: float):
  dp_accounting, _ = _dp_accounting()
  step = dp_accounting.GaussianDpEvent(noise_multiplier)
  if sampling_rate < 1:
    step = dp_accounting.PoissonSampledDpEvent(sampling_rate, step)
  return dp_accounting.SelfComposedDpEvent(step, int(steps))


def _accountant(discretization: float):
  _, pld = _dp_accounting()
  return pld.PLDAccountant(value_discretization_interval=discretization)


def epsilon(s: DPSettings, delta: float | None = None,
            discretization: float = DISCRETIZATION) -> float:
  """ε of the recipe at δ (``s.delta`` unless given) by the PLD accountant, add-or-remove
  adjacency: an upper bound on the exact ε, above it by at most ``discretization``.

  Returns:
    float ε ≥ 0; inf where the recipe has no noise or no clipping.
  Raises:
    ValueError: δ outside (0, 1).
    ImportError: dp-accounting is not installed.
  """
  delta = s.delta if delta is None else float(delta)
  if not 0 < delta < 1:
    raise ValueError(f"delta must be in (0, 1), got {delta}")
  if not s.private:
    return math.inf
  return _epsilon(s.noise_multiplier, s.steps, s.sampling_rate, delta, discretization)


@functools.lru_cache(maxsize=64)   # seconds per call at small σ; victims share recipes
def _epsilon(sigma: float, steps: int, sampling_rate: float, delta: float,
             discretization: float) -> float:
  accountant = _accountant(discretization)
  accountant.compose(_event(sigma, steps, sampling_rate))
  return float(accountant.get_epsilon(delta))


def privacy_profile(s: DPSettings, epsilons, discretization: float = DISCRETIZATION
                    ) -> np.ndarray:
  """δ(ε) of the recipe at each ε of ``epsilons`` (float[K], ≥ 0) by the PLD accountant (an
  upper bound: the pessimistic PLD). Returns float64[K] in [0, 1]; all 1 without a finite ε."""
  eps = np.asarray(epsilons, np.float64)
  if eps.ndim != 1 or np.any(~np.isfinite(eps)) or np.any(eps < 0):
    raise ValueError(f"epsilons must be a 1-D array of finite values ≥ 0, got {epsilons!r}")
  if not s.private:
    return np.ones_like(eps)
  accountant = _accountant(discretization)
  accountant.compose(_event(s.noise_multiplier, s.steps, s.sampling_rate))
  return np.asarray([accountant.get_delta(float(e)) for e in eps], np.float64)


def gdp_mu(s: DPSettings) -> float:
  """μ of the full-batch recipe: T steps of the Gaussian mechanism with noise multiplier σ
  (sensitivity C, noise σC) are μ-GDP with μ = √T/σ (Dong, Roth and Su, Thm. 2.7 and
  Cor. 3.3).

  Returns:
    float μ ≥ 0; inf without noise or clipping.
  Raises:
    ValueError: a Poisson-subsampled recipe (q < 1): it is not exactly GDP (use
      `privacy_profile`).
  """
  if s.sampling_rate < 1:
    raise ValueError(f"sampling_rate {s.sampling_rate} < 1: the subsampled Gaussian "
                     "mechanism is not μ-GDP; use its privacy profile")
  if not s.private:
    return math.inf
  return math.sqrt(s.steps) / s.noise_multiplier


def gdp_delta(eps, mu: float) -> np.ndarray:
  """The privacy profile of μ-GDP: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth
  and Su, Cor. 2.13), computed as Φ(a)·(1 − exp(ε + log Φ(b) − log Φ(a))) so that large ε
  keeps its digits.

  Args:
    eps: float or float[...] ≥ 0.
    mu: μ > 0.
  Returns:
    float64[...] δ in [0, 1].
  Raises:
    ValueError: μ not positive and finite.
  """
  if not (np.isfinite(mu) and mu > 0):
    raise ValueError(f"mu must be positive and finite, got {mu}")
  eps = np.asarray(eps, np.float64)
  a, b = -eps / mu + mu / 2, -eps / mu - mu / 2
  log_a, log_b = special.log_ndtr(a), special.log_ndtr(b)
  return np.exp(log_a) * -np.expm1(eps + log_b - log_a)


def gdp_mu_for_epsilon(eps: float, delta: float) -> float:
  """The μ at which μ-GDP has ε = ``eps`` at ``delta``: the root of `gdp_delta`(ε, μ) = δ
  (`scipy.optimize.brentq`; δ(ε) increases in μ from 0 at μ → 0 to 1 at μ → ∞).

  Raises:
    ValueError: ε not positive and finite, δ outside (0, 1).
  """
  if not (np.isfinite(eps) and eps > 0):
    raise ValueError(f"epsilon must be positive and finite, got {eps}")
  if not 0 < delta < 1:
    raise ValueError(f"delta must be in (0, 1), got {delta}")
  gap = lambda mu: float(gdp_delta(eps, mu)) - delta
  low, high = 1.0, 1.0          # bracket the root by halving and doubling
  while gap(low) > 0:
    low /= 2
  while gap(high) < 0:
    high *= 2
  return float(optimize.brentq(gap, low, high, xtol=1e-14, rtol=1e-14))


def noise_multiplier(target_epsilon: float, delta: float, steps: int,
                     sampling_rate: float = 1.0, discretization: float = DISCRETIZATION
                     ) -> float:
  """The σ at which the recipe (T = ``steps``, q = ``sampling_rate``) has ε =
  ``target_epsilon`` at ``delta``. Full batch: σ = √T/μ with μ = `gdp_mu_for_epsilon`,
  exact for the GDP mechanism (the PLD accountant's ε there is above the target by at most
  its discretisation). Subsampled: `dp_accounting.calibrate_dp_mechanism` with the PLD
  accountant (Brent's method; its ε at the σ returned is ≤ the target).

  Raises:
    ValueError: a target ε not positive and finite, δ outside (0, 1), steps < 1 or q
      outside (0, 1].
  """
  if not (np.isfinite(target_epsilon) and target_epsilon > 0):
    raise ValueError(f"target epsilon must be positive and finite, got {target_epsilon}")
  DPSettings(1.0, 1.0, steps, 1.0, sampling_rate, delta)   # checks the rest
  if sampling_rate == 1:
    return math.sqrt(steps) / gdp_mu_for_epsilon(target_epsilon, delta)
  dp_accounting, _ = _dp_accounting()
  return float(dp_accounting.calibrate_dp_mechanism(
      lambda: _accountant(discretization),
      lambda sigma: _event(sigma, steps, sampling_rate), float(target_epsilon),
      float(delta)))
