"""Helpers shared by tests in every folder (tests/ is on pytest's pythonpath)."""
