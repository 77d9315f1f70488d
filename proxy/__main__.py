"""``python -m proxy`` is the ``mend`` command."""

from proxy.cli import main

raise SystemExit(main())
