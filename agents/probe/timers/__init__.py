"""Timers: the protocol, the host and device-event timers, and the table that names them."""
