# The project is described in pyproject.toml; this shim lets older tools install it.
from setuptools import setup

setup()
