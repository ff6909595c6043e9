"""The experiment's configuration: `PPOConfig` holds every hyperparameter and its default."""

from configs.ppo import ConfigError, PPOConfig, live_ranges, validate

__all__ = ["ConfigError", "PPOConfig", "live_ranges", "validate"]
