"""The `schedsim` command line (`main.py`): one module per subcommand, on top of every other layer."""
