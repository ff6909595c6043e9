import sys

from experiments.pbt.cli import main

sys.exit(main())
