"""Staff admin of the engine: records and duplicate audits (:mod:`.audits`), Lua script
versions (:mod:`.scripts`). Importing the package registers both."""

from idempotency.admin import audits, scripts
from idempotency.admin.audits import ReadOnlyAdmin

__all__ = ["ReadOnlyAdmin", "audits", "scripts"]
