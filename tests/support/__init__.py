"""Helpers that tests and bench share and the wheel does not ship: simulated crowds and the train sample."""
