"""The current password asked on the password pages is guessed no more often than at the login.

The reproduced attack: whoever held a signed-in session (a browser left open, a copied cookie)
could send the dashboard's password page, or the admin's, any number of current passwords and
read from each answer whether it was the account's: 30 wrong guesses were 30 form errors, the
31st, right, changed the password, and the login lockout saw none of them, even from an address
it had locked out. The password then opened the account anywhere, for as long as it stood.
"""

from __future__ import annotations

from functools import partial

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.test import Client

from tests.dashboard.factories import PASSWORD
from tests.support.concurrency import at_once, password_checks_overlapping

pytestmark = pytest.mark.django_db

ADDRESS = "198.51.100.7"
NEW = "Quartz-Harbour-5521"
PAGES = [
    pytest.param("/dashboard/password/", False, id="dashboard"),
    pytest.param("/admin/password_change/", True, id="admin"),
]


def signed_in(staff: bool) -> tuple[User, Client]:
    if staff:
        user = User.objects.create_superuser("root", password=PASSWORD)
    else:
        user = User.objects.create_user("owner", password=PASSWORD)
    browser = Client(REMOTE_ADDR=ADDRESS)
    browser.force_login(user)
    return user, browser


def change(browser: Client, url: str, current: str, new: str = NEW) -> int:
    answer = browser.post(
        url, {"old_password": current, "new_password1": new, "new_password2": new}
    )
    return answer.status_code


@pytest.mark.parametrize("url, staff", PAGES)
def test_wrong_current_passwords_lock_the_page_as_failed_logins_do(url: str, staff: bool) -> None:
    user, browser = signed_in(staff)

    guesses = [change(browser, url, f"guess-{n}") for n in range(5)]
    right = change(browser, url, PASSWORD)

    assert guesses == [200] * 4 + [429]  # the form's error, then the lockout, as at the login
    assert right == 429
    user.refresh_from_db()
    assert user.check_password(PASSWORD)


@pytest.mark.parametrize("url, staff", PAGES)
def test_an_address_locked_out_of_the_login_cannot_check_passwords_on_the_page(
    url: str, staff: bool
) -> None:
    user, browser = signed_in(staff)
    login = "/admin/login/" if staff else "/dashboard/login/"
    for n in range(5):
        Client(REMOTE_ADDR=ADDRESS).post(login, {"username": user.username, "password": f"x{n}"})

    assert change(browser, url, PASSWORD) == 429
    user.refresh_from_db()
    assert user.check_password(PASSWORD)


def test_a_wrong_current_password_with_the_right_one_as_new_is_only_the_form_s_error() -> None:
    """The "already changed" answer of a double click (the second form's new password is the
    account's) is given only right after a change made in that session: given to any form, it
    told whether the new password typed was the account's, a second guess per request."""
    _, browser = signed_in(staff=False)
    url = "/dashboard/password/"

    answers = [change(browser, url, f"guess-{n}", new=PASSWORD) for n in range(5)]

    assert answers == [200] * 4 + [429]
    assert AccessAttempt.objects.get().failures_since_start == 5


def test_a_right_current_password_changes_it_and_a_double_click_says_so() -> None:
    user, browser = signed_in(staff=False)
    url = "/dashboard/password/"

    first = change(browser, url, PASSWORD)
    second = change(browser, url, PASSWORD)

    assert (first, second) == (302, 302)
    user.refresh_from_db()
    assert user.check_password(NEW)


@pytest.mark.django_db(transaction=True)
def test_guesses_sent_at_once_on_the_page_are_checked_one_at_a_time() -> None:
    """Ten wrong current passwords from one session at the same instant check five passwords,
    as ten logins at once do (``test_login_throttle.py``): each takes its address's turn."""
    user, browser = signed_in(staff=False)
    session = browser.cookies
    guesses = 10

    def guess(n: int) -> int:
        each = Client(REMOTE_ADDR=ADDRESS)
        each.cookies = session
        return change(each, "/dashboard/password/", f"guess-{n}")

    with password_checks_overlapping(guesses) as checked:
        answers = at_once(*[partial(guess, n) for n in range(guesses)])

    assert len(checked) == 5
    assert sorted(answers) == [200] * 4 + [429] * 6
    assert AccessAttempt.objects.get().failures_since_start == 5
    user.refresh_from_db()
    assert user.check_password(PASSWORD)


@pytest.mark.parametrize("url, staff", PAGES)
def test_a_right_current_password_clears_the_failures_as_a_successful_sign_in_does(
    url: str, staff: bool
) -> None:
    """Each password the page checks is a sign-in attempt, the right one included: at the
    login a success clears the pair's failures (AXES_RESET_ON_SUCCESS). Red before: the four
    typos before the right password stayed counted after it, so the holder's next typo, at the
    login or on the page, locked them out of their own account for the cool-off."""
    user, browser = signed_in(staff)
    login = "/admin/login/" if staff else "/dashboard/login/"

    typos = [change(browser, url, f"typo-{n}") for n in range(4)]
    changed = change(browser, url, PASSWORD)
    browser.logout()
    typo_at_login = browser.post(login, {"username": user.username, "password": "typo"})
    signed_back = browser.post(login, {"username": user.username, "password": NEW})

    assert typos == [200] * 4 and changed == 302
    assert typo_at_login.status_code == 200  # the form's error, not the lockout
    assert signed_back.status_code == 302
