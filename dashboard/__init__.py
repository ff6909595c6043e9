"""A local labml dashboard: the real labml-app, with a file store, local front-end
libraries, a safe static route and live hyperparameter changes.

Start it with ``python -m experiments.dashboard``; see `dashboard.client` for what a
training script calls.
"""
