"""Helpers for tests that need more than a test client: live servers and other real processes."""
