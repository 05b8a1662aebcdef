"""What the engine reports about one request's outcome, and its forms at rest.

An :class:`AuditEvent` is written as a row of ``DuplicateAudit`` (every outcome but a first
execution) and counted in ``OutcomeCount`` (every outcome). On its way it may be a Redis
stream entry (:meth:`AuditEvent.to_fields` / :meth:`AuditEvent.from_fields`): flat string
fields, as XADD takes them.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.utils import timezone

from idempotency.models import MISS, DuplicateAudit

OUTCOMES = (MISS, *DuplicateAudit.Outcome.values)

CountKey = tuple[str, str, str, datetime]
"""(tenant_key, endpoint, outcome, hour) of an ``OutcomeCount`` row."""


@dataclass(frozen=True)
class AuditEvent:
    tenant_key: str
    endpoint: str
    key: str
    outcome: str
    source: str
    principal: str
    request_meta: dict = field(default_factory=dict)
    differing_fields: list[str] = field(default_factory=list)
    resource_ref: str = ""
    at: datetime = field(default_factory=timezone.now)
    # one id per reported event, kept through the stream, so a copy of it is recognised
    event_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def is_duplicate(self) -> bool:
        """Whether the event is kept as an audit row (all but first executions)."""
        return self.outcome != MISS

    @property
    def count_key(self) -> CountKey:
        hour = self.at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        return (self.tenant_key, self.endpoint[:255], self.outcome, hour)

    def to_model(self) -> DuplicateAudit:
        return DuplicateAudit(
            tenant_key=self.tenant_key,
            endpoint=self.endpoint[:255],
            key=self.key[:255],
            outcome=self.outcome,
            source=self.source,
            principal=self.principal[:255],
            request_meta=self.request_meta,
            differing_fields=self.differing_fields,
            resource_ref=self.resource_ref[:100],
            at=self.at,
            event_id=self.event_id,
        )

    def to_fields(self) -> dict[str, str]:
        """The event as a stream entry. A first execution carries only what is counted."""
        fields = {
            "t": self.tenant_key,
            "e": self.endpoint,
            "o": self.outcome,
            "at": self.at.isoformat(),
        }
        if self.is_duplicate:
            fields.update(
                k=self.key,
                s=self.source,
                p=self.principal,
                m=json.dumps(self.request_meta, separators=(",", ":")),
                d=",".join(self.differing_fields),
                r=self.resource_ref,
                i=self.event_id,
            )
        return fields

    @classmethod
    def from_fields(cls, raw: dict[bytes | str, bytes | str]) -> AuditEvent:
        fields = {_text(k): _text(v) for k, v in raw.items()}
        return cls(
            tenant_key=fields["t"],
            endpoint=fields["e"],
            outcome=fields["o"],
            at=datetime.fromisoformat(fields["at"]),
            key=fields.get("k", ""),
            source=fields.get("s", ""),
            principal=fields.get("p", ""),
            request_meta=json.loads(fields["m"]) if fields.get("m") else {},
            differing_fields=[f for f in fields.get("d", "").split(",") if f],
            resource_ref=fields.get("r", ""),
            event_id=fields.get("i") or uuid.uuid4().hex,
        )


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value
