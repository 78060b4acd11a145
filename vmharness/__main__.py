import sys

from vmharness.cli import main

sys.exit(main())
