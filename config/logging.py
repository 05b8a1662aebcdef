"""One JSON object per log line, with the request context (``config/request_context.py``)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from config.request_context import current

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        context = current()
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": context.request_id or None,
            "tenant": context.tenant or None,
            "idempotency_key_hmac": context.idempotency_key_hash or None,
        }
        line.update(
            {
                k: v
                for k, v in record.__dict__.items()
                if k not in _STANDARD and not k.startswith("_")
            }
        )
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps({k: v for k, v in line.items() if v is not None}, default=str)
