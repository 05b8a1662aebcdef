"""Writes of the ordering domain: plain typed functions that views, tasks and commands call."""
