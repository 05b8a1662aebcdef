"""Webhook signatures: HMAC-SHA256 over timestamp + raw body, 5-minute window, rotation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ordering.payments.error_codes import CallbackRejected
from ordering.payments.signatures import sign, verify

BODY = b'{"event_id":"evt_1","status":"succeeded"}'
NOW = 1_760_000_000
TOLERANCE = 300
ARABIC_INDIC_DIGITS = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def check(
    signature: str | None,
    timestamp: str | None,
    *,
    body: bytes = BODY,
    now: float = NOW,
    secrets: tuple[str, ...] = ("s3cret",),
) -> int:
    return verify(
        secrets=secrets,
        timestamp=timestamp,
        signature=signature,
        body=body,
        tolerance_seconds=TOLERANCE,
        now=now,
    )


def test_a_correct_signature_within_the_window_verifies():
    assert check(sign(secret="s3cret", timestamp=NOW, body=BODY), str(NOW)) == NOW


@pytest.mark.parametrize(
    ("signature", "timestamp", "body", "status", "code"),
    [
        pytest.param(
            None, str(NOW), BODY, 401, "PAYMENT_SIGNATURE_INVALID", id="missing-signature"
        ),
        pytest.param(
            "v1=abc", None, BODY, 401, "PAYMENT_SIGNATURE_INVALID", id="missing-timestamp"
        ),
        pytest.param("v1=abc", "yesterday", BODY, 400, "PAYMENT_TIMESTAMP_INVALID", id="bad-ts"),
        pytest.param("v1=abc", "9" * 400, BODY, 400, "PAYMENT_TIMESTAMP_INVALID", id="huge-ts"),
        pytest.param(
            "v1=" + "0" * 64, str(NOW), BODY, 401, "PAYMENT_SIGNATURE_INVALID", id="forged"
        ),
        pytest.param("sha1=abc", str(NOW), BODY, 401, "PAYMENT_SIGNATURE_INVALID", id="scheme"),
    ],
)
def test_refusals_carry_a_code(signature, timestamp, body, status, code):
    with pytest.raises(CallbackRejected) as err:
        check(signature, timestamp, body=body)
    assert (err.value.status_code, err.value.error_code) == (status, code)


def test_a_tampered_body_or_timestamp_is_refused():
    good = sign(secret="s3cret", timestamp=NOW, body=BODY)
    for signature, timestamp, body in [
        (good, str(NOW), BODY.replace(b"succeeded", b"failed")),
        (good, str(NOW + 1), BODY),
        (sign(secret="other", timestamp=NOW, body=BODY), str(NOW), BODY),
    ]:
        with pytest.raises(CallbackRejected) as err:
            check(signature, timestamp, body=body)
        assert err.value.error_code == "PAYMENT_SIGNATURE_INVALID"


@pytest.mark.parametrize(
    ("skew", "fresh"),
    [(-TOLERANCE, True), (TOLERANCE, True), (TOLERANCE + 1, False), (-TOLERANCE - 1, False)],
    ids=["5-min-old", "5-min-ahead", "too-old", "too-far-ahead"],
)
def test_the_window_is_five_minutes_either_way(skew, fresh):
    sent = NOW + skew
    signature = sign(secret="s3cret", timestamp=sent, body=BODY)
    if fresh:
        assert check(signature, str(sent)) == sent
    else:
        with pytest.raises(CallbackRejected) as err:
            check(signature, str(sent))
        assert (err.value.status_code, err.value.error_code) == (400, "PAYMENT_TIMESTAMP_STALE")


def test_rotation_any_configured_secret_and_any_offered_signature_verifies():
    old = sign(secret="old", timestamp=NOW, body=BODY)
    new = sign(secret="new", timestamp=NOW, body=BODY)
    assert check(old, str(NOW), secrets=("new", "old")) == NOW
    assert check(f"{new},v1=deadbeef", str(NOW), secrets=("new",)) == NOW
    assert check(f"v1=deadbeef, {new}", str(NOW), secrets=("new",)) == NOW


def test_a_signed_timestamp_too_long_to_be_one_is_refused_not_a_500():
    """Signed with the provider's secret (only it could send this), 400 nines: red, 500
    (the skew's float conversion overflowed)."""
    huge = int("9" * 400)
    with pytest.raises(CallbackRejected) as err:
        check(sign(secret="s3cret", timestamp=huge, body=BODY), str(huge))
    assert (err.value.status_code, err.value.error_code) == (400, "PAYMENT_TIMESTAMP_INVALID")


@pytest.mark.parametrize(
    "written",
    [
        pytest.param(f"+{NOW}", id="plus-sign"),
        pytest.param(f"{NOW:_}", id="underscores"),
        pytest.param(f"0{NOW}", id="leading-zero"),
        pytest.param(str(NOW).translate(ARABIC_INDIC_DIGITS), id="arabic-indic-digits"),
        pytest.param(f"{NOW}.0", id="decimal"),
        pytest.param("-1", id="negative"),
    ],
)
def test_a_timestamp_is_written_only_as_plain_decimal_digits(written: str) -> None:
    """The MAC covers the timestamp as we write it (``str(int)``), so a header another way round
    (Python's ``int()`` reads a sign, underscores, leading zeros and non-ASCII digits) is not the
    text that was signed: it is 400 ``PAYMENT_TIMESTAMP_INVALID``, as the API schema's unsigned
    integer says, even with a signature over the number it reads as."""
    signature = sign(secret="s3cret", timestamp=int(float(written)), body=BODY)
    with pytest.raises(CallbackRejected) as err:
        check(signature, written)
    assert (err.value.status_code, err.value.error_code) == (400, "PAYMENT_TIMESTAMP_INVALID")


@pytest.mark.parametrize(
    ("environment", "read"),
    [
        pytest.param({}, "300", id="default-300-s"),
        pytest.param({"PAYMENT_CALLBACK_TOLERANCE_SECONDS": "600"}, "600", id="set-600-s"),
        pytest.param({"PAYMENT_CALLBACK_TOLERANCE": "600"}, "refused", id="the-old-name-refused"),
    ],
)
def test_the_tolerance_is_read_from_the_environment_under_its_documented_name(
    environment: dict[str, str], read: str
) -> None:
    """docs/payments-and-saga.md names PAYMENT_CALLBACK_TOLERANCE_SECONDS (300), the setting's
    own name; the environment was read as PAYMENT_CALLBACK_TOLERANCE, so the documented
    variable changed nothing. The old name, set, stops the server naming the new one rather
    than be ignored."""
    code = (
        "import django\n"
        "from django.core.exceptions import ImproperlyConfigured\n"
        "try:\n"
        "    django.setup()\n"
        "except ImproperlyConfigured as exc:\n"
        "    print('refused' if 'PAYMENT_CALLBACK_TOLERANCE_SECONDS' in str(exc) else exc)\n"
        "else:\n"
        "    from django.conf import settings\n"
        "    print(settings.PAYMENT_CALLBACK_TOLERANCE_SECONDS)\n"
    )
    names = ("PAYMENT_CALLBACK_TOLERANCE", "PAYMENT_CALLBACK_TOLERANCE_SECONDS")
    env = {k: v for k, v in os.environ.items() if k not in names}
    env |= {"DJANGO_SETTINGS_MODULE": "config.settings", **environment}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.stdout.split()[-1:] == [read], done.stderr
