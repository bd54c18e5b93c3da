"""``python -m ddnumba``: the ``ddnumba`` command (see :mod:`ddnumba.cli`)."""
import sys

from ddnumba.cli import main

sys.exit(main())
