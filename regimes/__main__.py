"""``python -m regimes``: the same as the ``regimes`` command."""

import sys

from regimes.cli import main

if __name__ == "__main__":
    sys.exit(main())
