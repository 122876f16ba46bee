"""`python -m instrument.flops`."""

import sys

from instrument.flops import main

sys.exit(main())
