"""`python -m advisor`: the one entry shim allowed to reach up to the CLI package."""

from cli import run

run()
