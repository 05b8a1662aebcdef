"""The configured payment providers (``settings.PAYMENT_PROVIDERS``), looked up by name."""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

from ordering.payments.base import PaymentProvider


class UnknownProvider(LookupError):
    """No provider of that name is configured (or it is switched off here)."""


def get_provider(name: str) -> PaymentProvider:
    """The adapter for ``name``; built per call because it is cheap and settings may change."""
    conf = settings.PAYMENT_PROVIDERS.get(name)
    if conf is None:
        raise UnknownProvider(name)
    return import_string(conf["ADAPTER"])(name=name)


def default_provider() -> PaymentProvider:
    """The provider new payments are started with."""
    return get_provider(settings.PAYMENT_DEFAULT_PROVIDER)


def webhook_secrets(name: str) -> list[str]:
    """The provider's webhook secrets: the first signs, any of them verifies (rotation)."""
    conf = settings.PAYMENT_PROVIDERS.get(name)
    if conf is None:
        raise UnknownProvider(name)
    secrets = [s for s in conf.get("SECRETS", []) if s]
    if not secrets:
        raise UnknownProvider(f"{name} has no webhook secret configured")
    return secrets
