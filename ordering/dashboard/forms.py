"""Input validation of the dashboard's forms. Writes happen in services, never in ``save()``."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.utils import timezone

from ordering.models import Coupon
from ordering.models.menu import MAX_DESCRIPTION_CHARS, MAX_STOCK
from ordering.privacy.diners import NotADinerId, check_diner_id
from ordering.services.lifecycle import MERCHANT_TARGETS
from ordering.shown_names import shown_name
from tenants.diner_sessions import DINER_ID_RE
from tenants.models import ApiClient, Membership

MONEY = {"max_digits": 10, "decimal_places": 2}


class DishCreateForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(
        required=False,
        max_length=MAX_DESCRIPTION_CHARS,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    price = forms.DecimalField(min_value=Decimal("0.00"), **MONEY)
    stock = forms.IntegerField(min_value=0, max_value=MAX_STOCK, initial=0)
    active = forms.BooleanField(required=False, initial=True, label="On the menu")

    def clean_name(self) -> str:
        return shown_name(self.cleaned_data["name"])


class DishUpdateForm(forms.Form):
    """``*_seen`` are the values the merchant looked at; the service only overwrites those,
    and only the fields the merchant changed. ``price_seen`` and ``active_seen`` may be
    missing (a page shown before they were added): those fields are then written as sent."""

    price = forms.DecimalField(min_value=Decimal("0.00"), **MONEY)
    stock = forms.IntegerField(min_value=0, max_value=MAX_STOCK)
    active = forms.BooleanField(required=False, label="On the menu")
    stock_seen = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    price_seen = forms.DecimalField(required=False, widget=forms.HiddenInput, **MONEY)
    active_seen = forms.NullBooleanField(required=False, widget=forms.HiddenInput)


class CouponCreateForm(forms.Form):
    code = forms.RegexField(
        regex=r"^[A-Za-z0-9_-]{2,40}$",
        max_length=40,
        error_messages={"invalid": "2-40 letters, digits, '-' or '_'."},
    )
    kind = forms.ChoiceField(choices=Coupon.Kind.choices)
    value = forms.DecimalField(min_value=Decimal("0.01"), **MONEY)
    max_uses = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=1_000_000,
        help_text="Empty: unlimited",
        label="Max uses",
    )
    valid_until = forms.DateTimeField(
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """The end is typed, and shown, in the restaurant's time zone (the dashboard's views run
        in it): the label names it."""
        super().__init__(*args, **kwargs)
        self.fields["valid_until"].label = f"Valid until ({timezone.get_current_timezone_name()})"

    def clean_code(self) -> str:
        return self.cleaned_data["code"].upper()

    def clean_valid_until(self) -> datetime | None:
        """In the future and at most ten years ahead: a past end would never apply, and one
        near the calendar's end cannot be shown in every time zone."""
        value = self.cleaned_data["valid_until"]
        if value is None:
            return None
        now = timezone.now()
        if value <= now:
            raise forms.ValidationError("Must be in the future.")
        if value > now + timedelta(days=3653):
            raise forms.ValidationError("At most ten years ahead.")
        return value

    def clean(self) -> dict:
        data = super().clean()
        if data.get("kind") == Coupon.Kind.PERCENT and (data.get("value") or 0) > 100:
            self.add_error("value", "A percentage is at most 100.")
        return data


class ApiKeyCreateForm(forms.Form):
    name = forms.CharField(max_length=100)

    def clean_name(self) -> str:
        return shown_name(self.cleaned_data["name"])

    kind = forms.ChoiceField(choices=ApiClient.Kind.choices)


class TransitionForm(forms.Form):
    to = forms.ChoiceField(choices=[(t, t) for t in MERCHANT_TARGETS])


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.STAFF)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


class DinerIdForm(forms.Form):
    """The owner names the diner by the id their app or backend uses (never a pseudonym)."""

    diner_id = forms.RegexField(
        regex=DINER_ID_RE,
        max_length=64,
        label="Diner id",
        error_messages={"invalid": "1-64 letters, digits or . _ : @ -"},
    )

    def clean_diner_id(self) -> str:
        diner_id: str = self.cleaned_data["diner_id"]
        try:
            check_diner_id(diner_id)
        except NotADinerId as exc:
            raise forms.ValidationError(str(exc)) from None
        return diner_id


class EraseDinerForm(DinerIdForm):
    """The diner to erase, and the owner's confirmation."""

    confirm = forms.BooleanField(
        label="I understand this cannot be undone: their orders stay, anonymised"
    )


class ExportDinerForm(DinerIdForm):
    """The diner whose copy of their data to download. Its fields' HTML ids start with
    ``export-``: the page shows it beside the erasure's form, which has a ``diner_id`` too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, auto_id="export-%s", **kwargs)
