"""``hpo run study.yaml``: a study file, validated, run as proxies -> universal curve -> sweep ->
summary and report.

:mod:`hpo.study.schema` reads and checks the YAML and :mod:`hpo.study.checks` makes the checks
before a run; :mod:`hpo.study.plan` holds the proxy plan and :mod:`hpo.study.run_config` what each
run trains with; :class:`~hpo.study.runner.StudyRunner` runs the stages
(:mod:`~hpo.study.proxies`, :mod:`~hpo.study.sweep` or :mod:`~hpo.study.ray_backend`,
:mod:`~hpo.study.summary`), and :mod:`hpo.study.report` writes ``report.md`` with its plots.
The stages share :mod:`~hpo.study.folder` (the output folder's files and lock),
:mod:`~hpo.study.trial_attrs` (the trial attributes' names), :mod:`~hpo.study.params`,
:mod:`~hpo.study.pruner`, :mod:`~hpo.study.monitor` (the residual monitor),
:mod:`~hpo.study.curves`, :mod:`~hpo.study.compute` (FLOPs), :mod:`~hpo.study.accuracy` and
:mod:`~hpo.study.formatting`.
Reading and validating a study file (``hpo validate``) imports no torch.
"""
