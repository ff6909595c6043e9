"""The project's version, in one place: setup.py reads it from this file, and every command's
`--version` prints it. (Not from the installed package's metadata: a checkout run with
`python -m` before `pip install -e .` has none, and an editable install's can lag the source.)"""

NAME = "breakout-ppo"
VERSION = "0.1.0"
