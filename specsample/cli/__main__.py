import sys

from specsample.cli.main import main

sys.exit(main())
