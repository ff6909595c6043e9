"""The experiment's configuration: `PPOConfig` (configs/ppo.py) holds every hyperparameter and its default."""
