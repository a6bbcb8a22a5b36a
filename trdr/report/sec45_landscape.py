"""Runkel et al. Sec. 4.5, the energy landscape of both attacks: Figs. 10–12, drawn from the
report's runs (`trdr.report.runs`)."""

from trdr import plotting
from trdr.report.runs import records_of, results_of


def landscapes(name):
  """Figs. 10–12: (a) bilevel and (b) DecoReco landscapes."""
  def draw(runs, config):
    del config
    panels = {label: (records_of(runs, run), tuple(results_of(runs, run)["grid_shape"]))
              for label, run in (("(a) bilevel", "landscape_bilevel"),
                                 ("(b) DecoReco", "landscape_decoreco"))}
    return {name: plotting.combined_landscape_figures(panels)[name]}
  return draw
