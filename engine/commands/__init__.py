"""One module per `autokernel` sub-command: HELP, add_arguments(parser), run(args) -> int."""
