"""Three views of the same work: validate 3 fields, INSERT one row, answer 201 with it.

- ``plain``: the bare DRF create, no authentication, no permission check;
- ``plain-engine``: the same handler behind this project's ``@idempotent`` (Redis claim,
  record insert in the same transaction, finish);
- ``plain-peer``: the same view behind drf-idempotency 1.0.0 with its Redis backend (``SET NX``
  to claim, ``GET`` + ``SET`` to finish; it keeps no database record).
"""

from __future__ import annotations

import drf_idempotency.settings
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bench.plain.models import PlainRecord
from idempotency.web.drf import idempotent

# drf-idempotency reads settings.IDEMPOTENCY, which is this project's engine's: point it at
# its own setting (DRF_IDEMPOTENCY, config/settings.py) before it reads anything.
drf_idempotency.settings.USER_SETTINGS_NAME = "DRF_IDEMPOTENCY"
from drf_idempotency import idempotent as peer_idempotent  # noqa: E402


class PlainRecordSerializer(serializers.ModelSerializer):
    class Meta:
        model = PlainRecord
        fields = ["id", "name", "quantity", "note"]


class PlainCreateView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        data = PlainRecordSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        data.save()
        return Response(data.data, status=status.HTTP_201_CREATED)


class PlainEngineView(PlainCreateView):
    @idempotent(required=True, fields=("name", "quantity", "note"))
    def post(self, request: Request) -> Response:
        return super().post(request)


plain_peer = peer_idempotent()(PlainCreateView.as_view())


class FixedAnswerView(APIView):
    """The floor under every case: DRF parses nothing, writes nothing, answers a fixed 201.

    What the server stack (gunicorn, Django's middleware, DRF's dispatch) costs per request on
    this machine, with no PostgreSQL and no Redis: a replay can at best approach it.
    """

    authentication_classes: list = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        return Response(FIXED_ANSWER, status=status.HTTP_201_CREATED)


FIXED_ANSWER = {"id": 1, "name": "fixed", "quantity": 1, "note": ""}
