"""Staff admin of the ordering domain: orders, menu and coupons (:mod:`.orders`); the outbox,
dead letters and provider conflicts (:mod:`.background`); data-protection requests
(:mod:`.privacy`); payments of restaurants that left (:mod:`.departed`). Importing the
package registers them all."""

from ordering.admin import background, departed, orders, privacy

__all__ = ["background", "departed", "orders", "privacy"]
