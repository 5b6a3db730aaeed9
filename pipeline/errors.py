"""The one exception type for user mistakes: the CLI prints it as a single line, without a traceback."""


class UserError(Exception):
    """A problem the user can fix (a missing file, a bad manifest value, no GPU for --device cuda)."""
