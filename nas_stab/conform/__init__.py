"""`nas-stab conform`: interval-backed checks that a model implements the parametrization it claims (cmd.py)."""
