"""Shared by every test folder: this file puts ``tests/`` on ``sys.path`` (pytest's
prepend import mode), so helpers such as :mod:`userplugins` import by name."""
