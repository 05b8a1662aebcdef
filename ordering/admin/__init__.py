"""Staff admin of the ordering domain: orders, menu and coupons (:mod:`.orders`); the outbox,
dead letters and provider conflicts (:mod:`.background`). Importing the package registers both."""

from ordering.admin import background, orders

__all__ = ["background", "orders"]
