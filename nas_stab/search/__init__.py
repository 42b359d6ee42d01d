"""Searching: the Optuna study (samplers, pruners, storage) and the runners."""
