"""Test harnesses that run real backing systems (Slurm) on this machine."""
