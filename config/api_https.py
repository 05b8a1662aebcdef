"""The API answers over HTTPS only: a request of ``/api/v1/`` over plain HTTP is refused with
403 ``HTTPS_REQUIRED``, where a page is redirected to HTTPS (``SECURE_SSL_REDIRECT``, on in
production).

A redirect does not serve an API. Django's is a 301, and a client following a 301 or 302 sends
a POST again as a GET (``fetch``, curl ``-L``, most HTTP stacks): ``POST /api/v1/orders/`` over
plain HTTP became a read of the diner's order list, a 200 that looked like an answer. A 308
would keep the method, but an app whose base URL says ``http://`` would then go on sending its
credential in the clear on every request without ever seeing an error. Refused, the mistake
shows at its first request, before anything reads the credential (the key it carried has
crossed the network in the clear: the detail says to treat it as exposed). The API's schema
and docs pages, which take no credential, are redirected as pages are
(``SECURE_REDIRECT_EXEMPT``, ``config/settings.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from config.api_errors import problem_http_response

HTTPS_REQUIRED = "HTTPS_REQUIRED"
# The API's own paths: refused over plain HTTP instead of redirected
API_PREFIX = "/api/v1/"
DETAIL = (
    "The API answers over HTTPS only: send this request to its https:// address. Nothing was "
    "done; a credential sent with it has crossed the network unencrypted, so treat it as exposed."
)


class ApiHttpsOnlyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            settings.SECURE_SSL_REDIRECT
            and request.path.startswith(API_PREFIX)
            and not request.is_secure()
        ):
            request.get_host()  # a Host this site does not serve is its 400 first, as for a page
            return problem_http_response(403, HTTPS_REQUIRED, DETAIL)
        return self.get_response(request)
