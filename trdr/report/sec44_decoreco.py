"""Runkel et al. Sec. 4.4, DecoReco on Haim et al.'s MLP: Figs. 5–9 and the trajectories,
drawn from the report's runs (`trdr.report.runs`)."""

from trdr import plotting
from trdr.evaluation import realism
from trdr.report import figures, verdicts
from trdr.report.verdicts import RULES
from trdr.report.runs import results_of, summary_of


def _hp_text(summary: dict) -> str:
  hp = summary["hyperparameters"]
  return (f"σ = {hp['init_scale']:.3g}, lr = {hp['lr']:.3g}, λ_min = {hp['lambda_min']:.3g}, "
          f"α = {hp['alpha']:.3g}")


def decoreco_grid(name, run, title, order="ssim"):
  """Figs. 5, 6, 8: one DecoReco run's reconstructions beside their nearest training image."""
  def draw(runs, config):
    summary = summary_of(runs, run)
    counts = ", ".join(f"SSIM ≥ {k[8:]}: {v}" for k, v in summary["reconstructed"].items())
    return {name: plotting.reconstruction_grid(
        results_of(runs, run), "train", n_show=config.decoreco.n_show, order=order,
        title=f"{title} ({_hp_text(summary)}; {counts} of {summary['n_train']})")}
  return draw


def _quiz(results):
  """Fig. 6's quiz of the tuned run (`trdr.evaluation.realism.quiz`): the odd one ranked below
  the paper's 50 scaled to the run's candidates (`verdicts.quiz_frame`), else, where no
  training image ranks that low (the verdict: not tested), below half of the distinct
  nearest training images, so that the figure still shows the quiz."""
  _, low, measured, testable = verdicts.quiz_frame(results["train_ssim"],
                                                   results["train_index"], RULES)
  low = low if testable else measured["distinct nearest training images"] // 2
  return realism.quiz(results["train_ssim"], results["train_index"], results["public_ssim"],
                      low_rank=low), low


def fig6(runs, config):
  del config
  results = results_of(runs, "tuned")
  quiz, low = _quiz(results)
  return {"fig6": figures.quiz_figure(results, quiz, title=(
      f"Fig. 6: {realism.QUIZ_TOP} of these are the best reconstructions of different "
      f"training images (by SSIM to their nearest one), one is ranked below {low} "
      "(ranks over distinct training images). "
      "Which one?"))}


def fig7(runs, config):
  results, summary = results_of(runs, "tuned"), summary_of(runs, "tuned")
  quiz, low = _quiz(results)
  return {"fig7": figures.quiz_figure(results, quiz, reveal=True, title=(
              f"Fig. 7: the reveal: #rank by SSIM to the nearest training image (bottom row; "
              f"each training image ranked once); "
              f"realism = SSIM to the nearest public test image ({_hp_text(summary)})")),
          "fig7_best_per_train": plotting.best_per_train_grid(
              results, n_show=config.decoreco.n_show,
              title=f"Haim et al.'s view: tuned σ ({_hp_text(summary)})"),
          "fig7_ssim_vs_output": plotting.ssim_vs_output(results)}


def fig9(runs, config):
  results = results_of(runs, "partition")
  panels = (("train", "(a): training set"), ("partition", "(b): the same reconstructions, "
                                                          "partition"))
  return {"fig9": plotting.stacked(
      panels, "Fig. 9: DecoReco from the distinct partition",
      lambda sub, p: plotting.reconstruction_grid(results, p[0], n_show=config.decoreco.n_show,
                                                  title=p[1], fig=sub),
      config.decoreco.n_show)}


def trajectories(runs, config):
  """The partition starts of both attacks along their iterations (`figures.trajectories`)."""
  del config
  panels = {"(a) bilevel, affine": results_of(runs, "affine"),
            "(b) bilevel, one-hidden": results_of(runs, "one_hidden"),
            "(c) DecoReco (min-max display)": results_of(runs, "partition")}
  return {"trajectories": figures.trajectories(
      panels, "Partition starts: distance to the training set, the partition and the start "
      "against iterations")}
