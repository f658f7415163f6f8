"""Tools around the product: the demo, benchmark harnesses, the synthetic fleet, importers,
load generators and the embedded Postgres; never part of the service image."""
