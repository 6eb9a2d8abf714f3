"""The HTTP surface: request/response values, edge checks, routes and problem details.

:func:`threadline.api.routes.route` answers a request over an :class:`ApiContext` (the parts of
one object the routes use); :class:`MaintenanceSources` is where the maintenance package plugs
its faults, binding waits and pass reports into ``GET /v1/spaces/{space}/maintenance``.
"""

from threadline.api.context import ApiContext, MaintenanceSources, NoMaintenanceSources
from threadline.api.http import Request, Response, json_response

__all__ = [
    "ApiContext",
    "MaintenanceSources",
    "NoMaintenanceSources",
    "Request",
    "Response",
    "json_response",
]
