"""``python -m monitor`` runs the command line."""

from monitor.cli import main

raise SystemExit(main())
