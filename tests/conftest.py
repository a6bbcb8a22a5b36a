"""Shared fixtures."""

import jax
import pytest


@pytest.fixture
def x64():
  """Runs a test with float64 enabled in JAX, restoring the previous setting after."""
  previous = jax.config.jax_enable_x64
  jax.config.update("jax_enable_x64", True)
  yield
  jax.config.update("jax_enable_x64", previous)
