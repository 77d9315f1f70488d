"""``python -m proxy`` is the ``mend`` command."""

from proxy.tools.cli import main

raise SystemExit(main())
