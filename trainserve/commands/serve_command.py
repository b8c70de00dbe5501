"""`trainserve serve`: the embedded KServe v2 / Triton-protocol server on onnxruntime."""

from __future__ import annotations

import typer

from trainserve.commands._typer import Args, options_of


@options_of("serve")
def serve(o: Args) -> None:
    """Serve a model repository over KServe v2 HTTP and gRPC with Triton's endpoints, ports and metrics.

    Prints 'trainserve serve: ready http=HOST:PORT grpc=HOST:PORT metrics=HOST:PORT' once serving;
    SIGTERM or Ctrl-C stops taking requests, finishes those in flight and exits 0.
    """
    from trainserve.core.options.serve import ServeOptions
    from trainserve.serve.engine.serve_entry import run_server

    # a StartError (a UserError) becomes one sentence and exit 1, as every command's
    run_server(ServeOptions(**o.of(ServeOptions)), on_ready=lambda line: typer.echo(line))
