"""apportion: GPU-time budgets, hierarchical fair share and a minimum-runtime contract."""

__version__ = "0.1.0"
