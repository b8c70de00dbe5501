"""The protocol layer: KServe v2 over HTTP (aiohttp and the lean infer path) and gRPC (the server's own HTTP/2,
or grpc.aio), the KServe codec both share, Prometheus' /metrics and the front ends' refusal counts.

Each front end speaks to a core (serve/engine/server_core.py, or remote_core.py in a front-end process) and
never to a model's sessions: `lint-imports` keeps trainserve.serve.model out of this package."""
