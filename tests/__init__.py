"""The test suite. Set here, before any test module imports torch:

`OMP_WAIT_POLICY=PASSIVE` makes torch's OpenMP threads sleep when they run out of work instead
of spinning. The suite runs two test files at once on two cores, each starting real training
runs with their own threads, so a spinning thread burns the core another process needs: two
training runs at once on this 2-core machine took 17–20 s with spinning and 8 s without
(`OMP_WAIT_POLICY=PASSIVE` vs unset, same commands, back to back). It changes no number any
test checks: it decides how idle threads wait, not what they compute. Tests inherit it, and so
do the processes they start; a value already set in the environment is kept.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
