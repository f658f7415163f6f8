"""The steps of `tps demo`: the service, the model, the agents."""
