"""The `anvil` command line: its arguments, and what each subcommand runs (`main`)."""
