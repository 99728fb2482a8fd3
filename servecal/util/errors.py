"""The one exception type for bad user input, shared by every stage."""


class InputError(ValueError):
    """Bad input from a user (a file, a flag, a table).

    The message is one line that says what is wrong and where (file, column, row);
    the CLI prints it as ``error: <message>`` and exits with code 2.
    """


class NoticeWarning(UserWarning):
    """Something the user should know about a run that is not an error (the CLI prints
    each one as a single ``warning: ...`` line on stderr)."""
