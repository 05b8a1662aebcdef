"""``Cache-Control: no-store`` on the dashboard's pages and the API's answers.

They show a restaurant's orders, diners and keys: no browser cache or shared proxy may keep a
copy (the back button after logging out, a shared computer, a caching proxy). The API's
answers hold a diner's session token, contact phone and address: without a policy a diner
app's HTTP stack may write them to disk (iOS's URLCache keeps such answers in its Cache.db).
A view that said ``no-store`` itself is left as it is, and so are the admin's views (Django's
``never_cache``), static files and the API's public schema and docs.

It sits outside the middleware that refuses a request by itself (a body too large, too many
query parameters, a charset other than UTF-8) and outside the one that rebuilds an API error
page as problem+json (a route that does not exist, a Host the site does not serve): placed
inside them, it never saw those answers, and they went out with no ``Cache-Control`` at all.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers

PRIVATE_PREFIXES = ("/dashboard/", "/api/v1/")


class NoStoreMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        cache_control = response.get("Cache-Control", "")
        if request.path.startswith(PRIVATE_PREFIXES) and "no-store" not in cache_control:
            add_never_cache_headers(response)
        return response
