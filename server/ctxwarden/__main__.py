"""``python -m ctxwarden``: the ``ctxwarden`` command."""

import sys

from ctxwarden.cli import main

sys.exit(main())
