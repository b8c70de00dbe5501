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
    """Unknown version, or no version available (HTTP 404, gRPC NOT_FOUND); an unknown model is an
    InvalidArgument, as in Triton."""

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
    """A protocol feature this server does not implement (HTTP 501 and gRPC UNIMPLEMENTED, as Triton maps
    its UNSUPPORTED errors: src/http_server.cc HttpCodeFromError)."""

    http_status = 501
    grpc_code = "UNIMPLEMENTED"


class Internal(ServeError):
    """The model failed while running (HTTP 500, gRPC INTERNAL)."""


class RequestTimeout(ServeError):
    """A request's head or body did not arrive in time: HTTP 408, and the connection is closed (its rest
    would be read as the next request)."""

    http_status = 408
    grpc_code = "DEADLINE_EXCEEDED"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the request body did not arrive within {timeout_s:g} s; send it whole, or raise "
                         "--body-timeout-s")


class TooLarge(ServeError):
    """A request body over --max-body-bytes (HTTP 413)."""

    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"

    def __init__(self, size: int | None, limit: int, encoding: str = "") -> None:
        # size None: a body without a declared length (chunked), or one that grew past the limit as it was inflated
        if size is not None:
            what = f"request body of {size} bytes"
        elif encoding:
            what = f"request body, inflated from its {encoding} encoding,"
        else:
            what = "request body"
        super().__init__(f"{what} exceeds the server's limit of {limit} bytes (--max-body-bytes)")


class TooManyConnections(ServeError):
    """The HTTP server already holds --max-connections connections (HTTP 503, then the connection closes)."""

    http_status = 503
    grpc_code = "UNAVAILABLE"

    def __init__(self, limit: int) -> None:
        super().__init__(f"the server already holds its limit of {limit} connections (--max-connections); "
                         "retry later, or close idle connections")
