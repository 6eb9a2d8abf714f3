"""The HTTP surface: request/response values, edge checks, routes and problem details."""

from threadline.api.http import Request, Response, json_response

__all__ = ["Request", "Response", "json_response"]
