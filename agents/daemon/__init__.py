"""The agent daemon: probe workload problems, spool the runs, ship them, warm-start from priors."""
