"""The library's error for a mistake the user can fix.

Library code (configs' validation, stages, the server's start-up) raises UserError, or a subclass,
for bad input: a wrong option, a missing file, a port in use. Its message is one sentence saying
what is wrong and what to do. It is a ValueError, so callers that catch ValueError around a config
keep working. The command line (trainserve/cli.py) prints any of them as that one sentence on
stderr, without a traceback, and exits with code 1; library callers catch it like any exception.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake the user can fix: its message is one sentence saying what is wrong and what to do."""
