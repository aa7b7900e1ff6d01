import sys

from cpuft.cli.main import main

sys.exit(main())
