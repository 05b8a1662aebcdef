"""``GET /api/schema/``: drf-spectacular's schema view, without its ``?version=`` parameter.

The API is versioned by its path (``/api/v1/``), not by a query parameter; drf-spectacular
copied any ``?version=`` it was sent into the answer's ``Content-Disposition`` file name, so a
control character there was a 500 for anyone (gunicorn refused the header it could not write),
and a quote broke the name. The parameter is ignored: the schema is the same whatever it says.
"""

from __future__ import annotations

from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request


class SchemaView(SpectacularAPIView):
    def _get_version_parameter(self, request: Request) -> None:
        return None
