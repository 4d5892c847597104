"""``hpo run study.yaml``: a study file, validated, run as proxies -> universal curve -> sweep ->
summary and report.

:mod:`hpo.study.schema` reads and checks the YAML; :mod:`hpo.study.plan` says what each run
trains (the proxy plan, a trial's ``TrainConfig`` and recipe, its FLOPs);
:class:`~hpo.study.runner.StudyRunner` runs the stages (:mod:`~hpo.study.proxies`,
:mod:`~hpo.study.sweep`, which hands each claimed trial to :mod:`~hpo.study.trial`,
:mod:`~hpo.study.summary`) through the study's backend
(:mod:`~hpo.study.local`, or :mod:`~hpo.study.ray_backend` for ``backend: ray``), and
:mod:`hpo.study.report` writes ``report.md`` with its plots. The stages share
:mod:`~hpo.study.folder` (the output folder's files and lock, the checks before a run, the curves
in it), :mod:`~hpo.study.trials` (what a study reads from and writes on its Optuna trials),
:mod:`~hpo.study.claims` (which process runs which trial: claims, heartbeats, re-runs) and
:mod:`~hpo.study.pruner` (the collapse pruner's arguments and the residual monitor).
Reading and validating a study file (``hpo validate``) imports no torch.
"""
