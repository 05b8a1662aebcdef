"""Payment providers: the adapter interface, the built-in simulated provider, signed webhooks.

- :mod:`ordering.payments.base` — what every provider adapter offers (start, refund, parse a
  callback) and the values they return;
- :mod:`ordering.payments.registry` — the configured providers (``settings.PAYMENT_PROVIDERS``);
- :mod:`ordering.payments.signatures` — HMAC-SHA256 over timestamp + raw body;
- :mod:`ordering.payments.callbacks` — the webhook service: verify, dedupe, apply once;
- :mod:`ordering.payments.simulated` — the demo/test provider, which can sign its own callbacks.
"""
