r"""docs/verdicts.md from a report's report.json (`make figures` writes it):

  python experiments/results_doc.py --report=runs/report_cpu/report.json \
      --output=docs/verdicts.md

The README's results link to that file; nothing in it is typed by hand.
"""

import json

from absl import app, flags

from trdr.report import markdown
from trdr.runtime import files

_REPORT = flags.DEFINE_string("report", "runs/report_cpu/report.json", "The report.json.")
_OUTPUT = flags.DEFINE_string("output", "docs/verdicts.md", "The Markdown file written.")


def main(argv):
  del argv
  with open(_REPORT.value) as f:
    report = json.load(f)
  try:
    page = markdown.verdicts_page(report, _REPORT.value)
  except KeyError as e:
    raise SystemExit(f"error: {_REPORT.value} lacks {e}: it predates the verdicts page; "
                     "rerun `make figures` (finished runs are reused)") from None
  files.atomic_write(_OUTPUT.value, page.encode())
  print(f"Wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
