"""Staff admin of the ordering domain: orders, menu and coupons (:mod:`.orders`); the outbox,
dead letters and provider conflicts (:mod:`.background`); data-protection requests
(:mod:`.privacy`). Importing the package registers them all."""

from ordering.admin import background, orders, privacy

__all__ = ["background", "orders", "privacy"]
