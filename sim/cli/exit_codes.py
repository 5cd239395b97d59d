"""The `schedsim` command's exit statuses, in one place (the entry point reads it before anything heavy)."""

EXIT_BAD_INPUT = 2  # a value that cannot be used: one line on stderr names it
EXIT_STRICT = 3  # the run finished, but --strict refuses its rejected requests
EXIT_ENGINE_FAILS = 4  # the policy stopped where the engine it models itself fails (nothing written)
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE
