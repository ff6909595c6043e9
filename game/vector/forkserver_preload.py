"""Imported by the forkserver that forks the game workers (`PipePool` names it in
`set_forkserver_preload`), and by nothing else: importing it makes the process ignore SIGINT and
SIGTERM, and every worker the forkserver forks inherits that.

Why: `kill -TERM -PGID`, `timeout`, systemd and SLURM signal every process of the run, not only
the trainer. A worker (or the forkserver, whose death reads as the death of every worker it
started) that died of that signal would be "replaced" with new seeds, and an exact resume would
no longer be exact. The trainer handles the signal for all of them: it checkpoints, then closes
its workers itself (CLOSE, then SIGKILL past a deadline; SIGTERM would be ignored).
"""

import signal

for _stop_signal in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_stop_signal, signal.SIG_IGN)
