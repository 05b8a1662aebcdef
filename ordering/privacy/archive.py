"""The archive a tenant takes away when it leaves: a zip of JSON files, one per kind of data.

``orders.json`` (with ``order_lines.json`` and ``order_transitions.json``), ``menu.json`` (the
dishes), ``coupons.json``, ``payments.json`` and ``sales_days.json``, each in Django's JSON
serialisation (``[{"model", "pk", "fields"}, …]``, loadable with ``manage.py loaddata``), plus
``manifest.json``: the tenant, when, and how many objects each file holds.

The file is written next to its final path and renamed into place once complete, so a crash
while exporting leaves no archive that looks whole; exporting again overwrites it. It holds
the diners' ids, notes and contact details, so it is readable by its owner only (mode 0600)
from the moment it is created, whatever the process's umask.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

from django.core import serializers
from django.db.models import QuerySet
from django.utils import timezone

from ordering.models import Coupon, Dish, Order, OrderLine, OrderTransition, Payment, SalesDay
from tenants.models import Tenant

DATASETS: dict[str, Callable[[Tenant], QuerySet]] = {
    "orders.json": lambda t: Order.all_tenants.filter(tenant=t).order_by("pk"),
    "order_lines.json": lambda t: OrderLine.all_tenants.filter(tenant=t).order_by("pk"),
    "order_transitions.json": lambda t: OrderTransition.all_tenants.filter(tenant=t).order_by("pk"),
    "menu.json": lambda t: Dish.all_tenants.filter(tenant=t).order_by("pk"),
    "coupons.json": lambda t: Coupon.all_tenants.filter(tenant=t).order_by("pk"),
    "payments.json": lambda t: Payment.all_tenants.filter(tenant=t).order_by("pk"),
    "sales_days.json": lambda t: SalesDay.all_tenants.filter(tenant=t).order_by("pk"),
}


def archive_holds_all(*, tenant: Tenant, path: Path, sha256: str) -> bool:
    """Whether the archive at ``path`` is the one written (``sha256``) and its manifest counts
    as many rows of each kind as the tenant has now: False when it is gone, altered, or rows
    were written since (a request that passed authentication before the suspension)."""
    try:
        with path.open("rb") as written:
            if hashlib.file_digest(written, "sha256").hexdigest() != sha256:
                return False
        with zipfile.ZipFile(path) as archive:
            files = json.loads(archive.read("manifest.json"))["files"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return False
    return files == {name: rows(tenant).count() for name, rows in DATASETS.items()}


def partial_archive(path: Path) -> Path:
    """Where the archive for ``path`` is written until it is complete."""
    return path.with_name(f".{path.name}.partial")


def export_tenant(*, tenant: Tenant, path: Path) -> str:
    """Write the tenant's archive to ``path``; returns its SHA-256 (hex). An export that
    fails (a full disk, a lost database) removes what it had written: the partial archive
    holds diners' data, and the offboarding may finish under another path, which leaves no
    run to clear this one's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_archive(path)
    partial.unlink(missing_ok=True)  # a crashed export's leftover, whatever its mode
    try:
        return _write_archive(tenant=tenant, path=path, partial=partial)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _write_archive(*, tenant: Tenant, path: Path, partial: Path) -> str:
    counts: dict[str, int] = {}
    owner_only = os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")
    with owner_only, zipfile.ZipFile(owner_only, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, rows in DATASETS.items():
            queryset = rows(tenant)
            counts[name] = queryset.count()
            with archive.open(name, "w") as raw, io.TextIOWrapper(raw, "utf-8") as text:
                serializers.serialize("json", queryset.iterator(chunk_size=500), stream=text)
        manifest = {
            "tenant": {"id": tenant.pk, "slug": tenant.slug, "name": tenant.name},
            "exported_at": timezone.now().isoformat(),
            "files": counts,
        }
        archive.writestr("manifest.json", json.dumps(manifest, indent=2))
    with partial.open("rb") as done:
        os.fsync(done.fileno())
        digest = hashlib.file_digest(done, "sha256").hexdigest()
    os.replace(partial, path)
    return digest
