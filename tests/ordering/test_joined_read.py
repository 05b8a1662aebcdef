"""ordering/prefetch.JoinedRead: a query with its select_related joins compiled once, whose rows
become the instances Django's own iteration of that query makes, joined instances included."""

from __future__ import annotations

import pytest
from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models import Value
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext

from ordering.models import Payment
from ordering.payments import callbacks
from ordering.payments.signatures import PROVIDER_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
from ordering.prefetch import JoinedRead
from tests.payments.helpers import paying_order, signed
from tests.support.compiles import compiled_models

pytestmark = pytest.mark.django_db


def payments_with_order_and_tenant(order_id: object, provider_txn_id: object):
    return Payment.all_tenants.select_related("order__tenant").filter(
        order_id=order_id, provider_txn_id=provider_txn_id
    )[:1]


def test_its_rows_are_the_instances_the_orm_makes_with_their_joined_rows(tenant, menu):
    # given two payments, each of its own order
    first = paying_order(tenant, menu["pizza"])[1]
    second = paying_order(tenant, menu["pasta"], quantity=2)[1]
    # when the query is compiled from the first and run with the second's values
    read = JoinedRead.of(
        payments_with_order_and_tenant(first.order_id, first.provider_txn_id),
        [first.order_id, first.provider_txn_id],
        using=DEFAULT_DB_ALIAS,
    )
    assert read is not None
    with CaptureQueriesContext(connection) as queries:
        found = read.first([second.order_id, second.provider_txn_id], using=DEFAULT_DB_ALIAS)
        # then it is one query, and the order and its tenant come with the payment
        order, tenant_read = found.order, found.order.tenant
    assert len(queries) == 1
    # and each is what the ORM reads for the second payment
    [expected] = payments_with_order_and_tenant(second.order_id, second.provider_txn_id)
    for got, want in ((found, expected), (order, expected.order), (tenant_read, tenant)):
        assert type(got) is type(want) and got.pk == want.pk
        assert model_to_dict(got) == model_to_dict(want)
        assert not got._state.adding and got._state.db == DEFAULT_DB_ALIAS
    # and a key that reads nothing is None
    assert read.first([second.order_id, "sim_none"], using=DEFAULT_DB_ALIAS) is None


def test_a_read_whose_compiled_parameters_are_not_the_ones_given_is_not_kept(tenant, menu):
    payment = paying_order(tenant, menu["pizza"])[1]
    # the ORM converts the order's key given as text: the compiled parameter is another value
    text_key = str(payment.order_id)
    rows = payments_with_order_and_tenant(text_key, payment.provider_txn_id)
    assert JoinedRead.of(rows, [text_key, payment.provider_txn_id], using="default") is None
    # and one value in two places cannot be told apart
    same = payment.provider_txn_id
    rows = Payment.all_tenants.select_related("order").filter(provider=same, provider_txn_id=same)
    assert JoinedRead.of(rows, [same, same], using="default") is None
    # and a query of values, or with an annotation, is not a model's rows
    key = [payment.order_id, payment.provider_txn_id]
    rows = payments_with_order_and_tenant(*key)
    assert JoinedRead.of(rows.values("amount"), key, using="default") is None
    assert JoinedRead.of(rows.annotate(n=Value(1)), key, using="default") is None


@pytest.mark.django_db(transaction=True)  # as served: the callback's own transaction
def test_a_callback_s_locked_read_is_compiled_once_per_process(tenant, menu, monkeypatch):
    # given a process that has not compiled the read yet
    monkeypatch.setattr(callbacks, "_LOCKED_READS", {})
    deliveries = [signed(paying_order(tenant, menu["pizza"])[1]) for _ in range(2)]
    # when two callbacks arrive, one after the other
    with compiled_models() as compiled:
        for body, headers in deliveries:
            callbacks.handle_payment_callback(
                provider_name=headers[PROVIDER_HEADER],
                raw_body=body,
                timestamp=headers[TIMESTAMP_HEADER],
                signature=headers[SIGNATURE_HEADER],
            )
    # then only the first built the payment's query: the second ran the text kept
    assert compiled.count(Payment) == 1
    assert Payment.objects.for_tenant(tenant).filter(status="succeeded").count() == 2
