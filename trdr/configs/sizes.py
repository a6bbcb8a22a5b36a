"""The sizes a config is built at: the variant after the colon of --config=FILE:VARIANT."""

# The sizes a config is named with after the colon of --config=FILE:VARIANT: "" the
# paper's own, "cpu" the size the report's figures run at on a 2-core CPU, "smoke" the
# size the tests run.
PAPER = ("", "cpu", "smoke")
CPU = ("cpu", "smoke")


def variant(arg: str | None, known: tuple[str, ...] = PAPER) -> str:
  """The variant ``arg`` names (None reads as ``known[0]``), checked against ``known``.

  Raises:
    ValueError: ``arg`` names no variant of ``known``; the message lists them.
  """
  name = known[0] if arg is None or arg == "" else arg
  if name not in known:
    shown = ", ".join(f"{v!r}" + (" (paper size)" if v == "" else "") for v in known)
    raise ValueError(f"unknown config variant {arg!r}; known: {shown}")
  return name
