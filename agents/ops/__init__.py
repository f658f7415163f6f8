"""Ops the engine can probe: how to build operands for a problem and check an output."""
