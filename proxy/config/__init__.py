"""The configuration: what the operator wrote, read once into frozen values (the bottom floor)."""
