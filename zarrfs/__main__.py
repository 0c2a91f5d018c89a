"""``python -m zarrfs``: the same as the ``zarrfs`` command (see ``zarrfs.cli``)."""

import sys

from zarrfs.cli import main

sys.exit(main())
