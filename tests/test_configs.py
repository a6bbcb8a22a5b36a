"""Every config of trdr/configs builds at each of its variants and refuses a variant it
does not have, naming the ones it has (`trdr.configs.sizes.variant`)."""

import importlib
import pkgutil

import pytest

import trdr
from trdr import configs
from trdr.configs import sizes

NAMES = sorted(m.name for m in pkgutil.iter_modules(configs.__path__) if m.name != "sizes")


def test_variant_reads_none_and_empty_as_the_first_known():
  assert sizes.variant(None) == sizes.variant("") == ""
  assert sizes.variant(None, sizes.CPU) == "cpu"
  assert sizes.variant("smoke", sizes.CPU) == "smoke"
  with pytest.raises(ValueError, match=r"unknown config variant 'paper'; known: 'cpu', 'smoke'"):
    sizes.variant("paper", sizes.CPU)


@pytest.mark.parametrize("name", NAMES)
def test_each_config_builds_and_refuses_an_unknown_variant(name):
  module = importlib.import_module(f"trdr.configs.{name}")
  known = getattr(module, "VARIANTS", None)
  for v in known or ("", "smoke"):   # every config has a default and a ":smoke"
    assert trdr.get_config(name, v) is not None
  with pytest.raises(ValueError, match=r"unknown config variant 'no-such-size'; known: "):
    module.get_config("no-such-size")
