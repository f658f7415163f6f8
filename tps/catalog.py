"""Public datasheet figures for hardware known only by name."""
