"""PPO for pixel-based Atari: model, GAE, losses, rollout storage, and the trainer that ties them."""
