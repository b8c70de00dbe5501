"""The bottom layer every stage may import: the profile record, the model card, telemetry, errors,
file and process helpers, the runs folder and the bounds a figure must respect.

It imports nothing from the stages (train, serve, loadtest) or the layers above them
(cli, commands, pipeline, report); `lint-imports` holds it to that (see pyproject.toml).
"""
