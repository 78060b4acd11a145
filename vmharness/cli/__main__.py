"""`python -m vmharness.cli`: the same command as `vmharness`."""

import sys

from vmharness.cli.main import main

sys.exit(main())
