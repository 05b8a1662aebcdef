"""The engine's core: keys, fingerprints, outcomes, settings, and the request flow that ties
them to the stores (:mod:`idempotency.core.engine`)."""
