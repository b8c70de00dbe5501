"""Errors of the serving core, each carrying the status both front ends map (HTTP code, gRPC code).

The messages follow Triton's wording so programs written against Triton read the same text.
"""

from __future__ import annotations


class ServeError(Exception):
    """Base of every error the core raises to a front end; `http_status` and `grpc_code` say how to answer."""

    http_status = 500
    grpc_code = "INTERNAL"  # name of a grpc.StatusCode member

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(ServeError):
    """The request is malformed or does not match the model (HTTP 400, gRPC INVALID_ARGUMENT)."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class NotFound(ServeError):
    """Unknown model or version (HTTP 404, gRPC NOT_FOUND)."""

    http_status = 404
    grpc_code = "NOT_FOUND"


class MethodNotAllowed(ServeError):
    """A known HTTP route asked with a method it does not take (HTTP 405 with an Allow header)."""

    http_status = 405
    grpc_code = "UNIMPLEMENTED"

    def __init__(self, method: str, path: str, allow: str) -> None:
        super().__init__(f"Method Not Allowed: {method} {path} (allowed: {allow})")
        self.allow = allow


class Unavailable(ServeError):
    """The model is not ready, the queue is full, or the server is shutting down (HTTP 503, gRPC UNAVAILABLE)."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


class Unsupported(ServeError):
    """A protocol feature this server does not implement (HTTP 400, gRPC UNIMPLEMENTED)."""

    http_status = 400
    grpc_code = "UNIMPLEMENTED"


class Internal(ServeError):
    """The model failed while running (HTTP 500, gRPC INTERNAL)."""
