"""``python -m tfdiag_magic``: see `cli`."""

from .cli import main

raise SystemExit(main())
