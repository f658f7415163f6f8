"""The cross-architecture latency model: data in, training, evaluation, artifacts, priors.

What the service calls (none of it imports the service):

- Training from stored probe runs::

      bundle = models.bundle.train_bundle(runs)          # Iterable[ProbeRun] or TuningData
      artifact = bundle.to_bytes()                       # gzipped JSON, deterministic
      digest = models.bundle.checksum(artifact)          # sha256 hex, stored with the version
      bundle = ModelBundle.from_bytes(artifact, expected_checksum=digest)

  With a Dask client, `train_bundle(runs, client=client)` trains the boosters on the cluster.

- Training data from the service's database: `TuningData.from_medians(rows, hardware=...,
  problems=..., candidates=...)` (one row per hardware, problem and candidate).

- Quality gate on held-out data: `models.evaluation.evaluate_holdout(TuningData, name, op=...)`
  and `leave_one_out(...)` return typed reports (models.reports.HoldoutReport: score@1, score@5,
  probes to within 3%, median APE for the model, the served policy and the nearest and random
  baselines; the Brier score and reliability table of the served confidence), written out
  by `report.as_dict()`; `summarise(...)` averages them per op. Every ranking comes from a
  `models.ranking.Ranker`. The served policy is chosen by `models.selection.choose_policy` on
  the training hardware only.

- Priors for (hardware, problem)::

      models.priors.rank(bundle, hardware, problem, candidates=None, limit=8)
          -> list[RankedCandidate(candidate, predicted_us, score, source, confidence)]

  `source` is one of tps.schemas.PriorSource (observed, model, nearest, family); the op's
  policy (models.policy.BlendPolicy, chosen when the bundle was trained) decides the order,
  `confidence` is the calibrated P(within 3% of the best) (models.calibration), and
  `models.priors.rationale(...)` says why when the order is not that of predicted_us.
  `bundle.candidate_universe(op)` lists the candidates known per op;
  `models.priors.family_winners(...)` the shape family's.
"""

import os

# LightGBM and scikit-learn run OpenMP teams whose idle threads spin, by OpenMP's default,
# waiting for the next parallel region. Where the cores are shared (a training job beside the
# service's requests, a host running other work), a team then waits for its descheduled
# members at every barrier: a training of 13 s took over 190 s beside two busy processes on
# two cores (BENCHMARKS.md, "Training beside other work"). Unless the user chose a policy, idle
# threads sleep. Set here, before the first import of either library starts OpenMP.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
