"""The user-error type: what an entry point reports in a few lines, without a traceback.

An error is the user's when the user can fix it without touching the code: a config field or
value, a file or directory named on the command line or in a config, a task's format, an endpoint
that does not answer. Raise `UserError` (or a subclass) with a message that names the field or
file and says what was expected; `tmax_jax.cli` prints it as `error: ...` and exits 2 (the
traceback only with --debug). Everything else is a bug and keeps its traceback.

It subclasses ValueError so that callers catching ValueError (and tests expecting it) keep
working where a ValueError became a UserError. This module imports nothing: every layer can raise
it.
"""


class UserError(ValueError):
  """An error the user fixes (field, value, file, task format, endpoint); the message says how."""


class ConfigError(UserError):
  """A config field is unknown or its value invalid; the message starts with its dotted path."""
