"""The engine layer: how the server runs as processes. The core that routes, validates and queues requests
(server_core.py), the lifecycle that starts it and the front ends on one loop (server.py), the choice of
process topology (serve_entry.py), the model process and its front-end processes (model_process.py,
frontend_proc.py, remote_core.py) with their control channel (ipc.py) and shared memory (shm.py), and the
loop's busy-polling (spin.py) and heap care (heap.py).

It starts the protocol layer's front ends by module name (server.FRONTEND_MODULES) and imports none of
them; it runs models through trainserve.serve.model."""
