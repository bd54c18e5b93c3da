"""``python -m ddnumba``: the ``ddnumba`` command (see :mod:`ddnumba.cli`)."""
import sys

from ddnumba.cli import main

if __name__ == "__main__":
    sys.exit(main())
