"""A hold for processes that Ray starts (population members), where a test cannot run code of its
own: Python imports `sitecustomize` at start-up from PYTHONPATH, and Ray's workers inherit the
driver's environment. With MEMBER_HOLD_DIR set, a process that imports `ppo.trainer` holds when it
checkpoints update 1, touching MEMBER_HOLD_DIR/<pid>, until its run is asked to stop; it then
checkpoints and stops as it would have. So a test's Ctrl-C lands while every member trains,
whatever the machine's load. Put on PYTHONPATH by tests/test_pbt_resume.py only.
"""

import os

if os.environ.get("MEMBER_HOLD_DIR"):
    import importlib.abc
    import importlib.machinery
    import sys
    import time
    from pathlib import Path

    def hold_at_update_1(trainer_class):
        original = trainer_class.state_dict

        def state_dict(self, live_values):
            state = original(self, live_values)
            held = Path(os.environ["MEMBER_HOLD_DIR"]) / str(os.getpid())
            if self.update == 1 and not held.exists():
                held.touch()
                while not self.should_stop():
                    time.sleep(0.01)
            return state

        trainer_class.state_dict = state_dict

    class HoldTrainers(importlib.abc.MetaPathFinder):
        """Finds `ppo.trainer` as Python would, and patches its Trainer once the module has run."""

        def find_spec(self, name, path, target=None):
            if name != "ppo.trainer":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run_module = spec.loader.exec_module

            def run_then_hold(module):
                run_module(module)
                hold_at_update_1(module.Trainer)

            spec.loader.exec_module = run_then_hold
            return spec

    sys.meta_path.insert(0, HoldTrainers())
