import sys

from vmharness.cli.main import main

sys.exit(main())
