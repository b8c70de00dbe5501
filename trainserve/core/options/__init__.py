"""Each stage's options as one dataclass tree: the only place an option's name, default, unit and help are
written. The commands' typer options, Locust's arguments and web form, compose.yaml's defaults and
docs/options.md are generated from these trees (tests/test_options.py checks that they agree).

    spec      how a field becomes an option (opt, like, Command)
    train     ModelOptions, TrainOptions (train/config.py's TrainConfig), TrainJob, CompareJob
    serve     RepositoryOptions (Triton's model_config names), ExportJob, ServeOptions, LimitsJob
    load      Shared, LocustOptions (Locust's parser and web form), LoadJob
    cost      SloOptions, CostFlags (run, report, plan)
    run       RunOptions
    diff      DiffJob
    frontier  FrontierJob
    commands  which trees each command reads (COMMANDS)
"""
