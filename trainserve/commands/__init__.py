"""One module per CLI command: typer options and a call into the stage that does the work."""
