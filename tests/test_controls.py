"""The control attacks (`trdr.report.controls`) on the :smoke report's runs: the verdict
rules tell an attack that does nothing, one that throws its start away and one that
returns training images apart, and `trdr.experiment.reevaluate` recomputes a run's own
numbers from its own reconstructions."""

import json
import os

import numpy as np
import pytest

from trdr import experiment
from trdr.report import artefacts, verdicts
from trdr.runtime import files

# Claims that the attack keeps its start or recovers training images (Runkel Sec. 4.3 (b),
# (c): Figs. 2–4; Sec. 4.4: Figs. 6 and 9; Sec. 4.5: Fig. 10, "performs better in
# recovering", and Fig. 12, "converging towards ground truth"): fresh noise must neither
# pass them nor leave them uninformative.
KEEPS_OR_RECOVERS = ("fig2", "fig3", "fig4", "fig6", "fig9", "fig10", "fig12")
# Claims that the attack recovers training images (Fig. 2: "recovers the training data";
# Fig. 6: four among the top 10; Fig. 9: "a single training image can be reconstructed";
# Fig. 12: "converging towards"): returning the nearest training images must not fail
# them. Not Fig. 10: it says that bilevel recovers better than DecoReco, and the oracle
# makes the two attacks equal.
RECOVERS = ("fig2", "fig6", "fig9", "fig12")
# Claims that the attack does not recover training images (Fig. 1: from noise; Figs. 3
# and 4: "not reconstructing the true training data"): the oracle must not pass them.
RECOVERS_NONE = ("fig1", "fig3", "fig4")

def test_every_rule_tells_the_control_attacks_apart(smoke_report_dir, like_the_runs,
                                                   tmp_path):
  """Identity is never "reproduced"; worsening never "reproduced" or "uninformative" where
  the claim is that the attack keeps or recovers images; oracle never "not reproduced"
  where the claim is that it recovers training images, and never "reproduced" or
  "uninformative" where the claim is that it recovers none.

  The controls' runs are re-evaluated in a process compiled as the report's runs were
  (`like_the_runs`), so that it loads from the session's compilation cache the report's
  evaluation programs that the controls share; it compiles the rest (the controls' grid
  points are all distinct, where a run evaluates identical points once)."""
  found = json.loads(like_the_runs(
      "from trdr.configs import report as report_config\n"
      "from trdr.report import controls\n"
      "from trdr.runtime import files\n"
      "config = report_config.get_config('smoke')\n"
      f"print(files.dumps_json({{kind: controls.verdicts_of(config, {smoke_report_dir!r}, "
      f"kind, {str(tmp_path)!r}) for kind in controls.KINDS}}))\n").splitlines()[-1])
  assert set(found["identity"]) == set(found["worsening"]) == set(found["oracle"])
  assert {*KEEPS_OR_RECOVERS, *RECOVERS, *RECOVERS_NONE} <= set(found["identity"])
  for name, v in found["identity"].items():
    assert v["verdict"] != verdicts.REPRODUCED, (name, v["checks"])
  for name in KEEPS_OR_RECOVERS:
    v = found["worsening"][name]
    assert v["verdict"] not in (verdicts.REPRODUCED, verdicts.UNINFORMATIVE), (name, v)
  for name in RECOVERS:
    v = found["oracle"][name]
    assert v["verdict"] != verdicts.NOT_REPRODUCED, (name, v)
  for name in RECOVERS_NONE:
    v = found["oracle"][name]
    assert v["verdict"] not in (verdicts.REPRODUCED, verdicts.UNINFORMATIVE), (name, v)


@pytest.mark.parametrize("name", ["affine", "tuned"])
def test_reevaluating_a_run_with_its_own_images_gives_its_own_numbers(
    smoke_report_dir, like_the_runs, tmp_path, name):
  """A landscape with a lower level (||θ* − θ(x)||² re-solved) and a DecoReco attack:
  the same images through the same evaluation phase, the same programs on the same
  inputs, give the run's numbers bitwise (re-evaluated in a process compiled as the run
  was, `like_the_runs`); the start images' numbers, the history and the attack's outputs
  are carried over; another shape is refused by name."""
  source = artefacts.run_dir(smoke_report_dir, name)
  with experiment.load_results(source) as saved:
    own = {k: np.asarray(saved[k]) for k in saved}
  out = os.path.join(tmp_path, name)
  printed = like_the_runs(
      "from trdr import experiment\n"
      f"with experiment.load_results({source!r}) as saved:\n"
      "  images = saved['final_images']\n"
      f"print(experiment.reevaluate({source!r}, images, {out!r}).workdir)\n")
  assert printed.strip() == out and not os.path.exists(out + ".reevaluating")
  with experiment.load_results(out) as again:
    assert sorted(again) == sorted(own)
    for k in own:
      np.testing.assert_array_equal(np.asarray(again[k]), own[k], err_msg=k)
  timing = ("phase_seconds", "attack_seconds", "seconds_per_step")
  strip = lambda d: {k: v for k, v in d.items() if k not in timing and k != "reevaluated"}
  marker = experiment.FINISHED[artefacts.RUNS[name][1]]
  before, after = (files.read_json(os.path.join(d, marker)) for d in (source, out))
  if isinstance(before, list):
    before, after = [strip(r) for r in before], [strip(r) for r in after]
  else:
    before, after = strip(before), strip(after)
  assert files.dumps_json(after) == files.dumps_json(before)
  with pytest.raises(FileExistsError, match="new directory"):
    experiment.reevaluate(source, own["final_images"], out)
  with pytest.raises(ValueError, match="final images are"):
    experiment.reevaluate(source, own["final_images"][..., :1], out + "_shape")
  assert not os.path.exists(out + "_shape")
  with pytest.raises(FileNotFoundError, match="no finished run"):
    experiment.reevaluate(str(tmp_path), own["final_images"], out + "_none")
  with pytest.raises(ValueError, match="only landscape and attack runs"):
    experiment.reevaluate(artefacts.run_dir(smoke_report_dir, "sweep"), own["final_images"],
                          out + "_sweep")
