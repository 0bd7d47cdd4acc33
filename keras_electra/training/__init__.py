"""Optimizer, schedules, checkpoints and callbacks for training runs."""
