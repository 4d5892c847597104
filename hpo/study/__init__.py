"""``hpo run study.yaml``: a study file, validated, run as proxies -> universal curve -> sweep ->
summary and report.

:mod:`hpo.study.schema` reads and checks the YAML; :mod:`hpo.study.plan` holds the proxy plan,
the trial recipes and the checks before a run; :class:`~hpo.study.runner.StudyRunner` runs the
stages (:mod:`~hpo.study.proxies`, :mod:`~hpo.study.sweep` or :mod:`~hpo.study.ray_backend`,
:mod:`~hpo.study.summary`), and :mod:`hpo.study.report` writes ``report.md`` with its plots.
Reading and validating a study file (``hpo validate``) imports no torch.
"""
