"""A tiny Django app behind the engine: notes created through a DRF view and a form view."""
