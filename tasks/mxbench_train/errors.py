"""Errors that end a command with one line naming the input and the cause."""


class MxbenchError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""

    exit_code = 2


class NonFiniteLoss(MxbenchError):
    """Training diverged: the network's outputs became NaN or infinite."""

    exit_code = 3
