"""PLACEHOLDER: replaced by the real pass within the hour."""
