"""Checks over the repository's own files (code, studies, config)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# a design brief that is not part of the repository: code and studies cite the facts or papers
MISSING_DOC = "DESIGN" + ".md"


def _repository_files(suffixes: tuple[str, ...]) -> list[Path]:
    out = []
    for root, dirs, files in os.walk(REPO):
        # not .venv, .git, caches or build metadata
        dirs[:] = [d for d in dirs if not (d.startswith(".") or d == "__pycache__"
                                           or d.endswith(".egg-info"))]
        out += [Path(root) / f for f in files if Path(f).suffix in suffixes]
    return out


def test_repository_cites_no_file_it_lacks() -> None:
    assert not (REPO / MISSING_DOC).exists()
    files = _repository_files((".py", ".yaml", ".yml", ".toml"))
    assert any(p.name == "pyproject.toml" for p in files)
    citing = [f"{p.relative_to(REPO)}:{i}" for p in files
              for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
              if MISSING_DOC in line]
    # no .py, .yaml or .toml file points the reader at a file the repository does not have
    assert citing == []


def test_repository_reads_files_with_safe_loaders_only() -> None:
    import re

    code = [p for p in _repository_files((".py",))
            if p.relative_to(REPO).parts[0] in ("hpo", "predictors", "models", "benchmarks")]
    unsafe = re.compile(r"yaml\.(load|full_load|unsafe_load)\(|pickle\.loads?\(|np\.load\(.*"
                        r"allow_pickle=True|read_pickle\(")
    found = [f"{p.relative_to(REPO)}:{i}" for p in code
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if unsafe.search(line)
             or ("torch.load(" in line and "weights_only=True" not in line)]
    # YAML through yaml.safe_load, checkpoints through torch.load(weights_only=True), no pickle
    assert found == []


def _module_files() -> dict[str, Path]:
    """Module name -> file for the installed packages (``models/`` and ``predictors/`` install as
    ``hpo.models`` and ``hpo.predictors``)."""
    roots = {"hpo": REPO / "hpo", "hpo.models": REPO / "models",
             "hpo.predictors": REPO / "predictors"}
    out = {}
    for name, root in roots.items():
        for p in root.rglob("*.py"):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([name, *parts])] = p
    return out


def _import_graph() -> dict[str, set[str]]:
    """Module -> the product modules it imports, at any depth (imports inside functions count:
    they close a cycle just the same, only later)."""
    import ast

    files = _module_files()
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                           for a in node.names]
            deps |= {t for t in targets if t in files and t != mod}
        graph[mod] = deps
    return graph


def test_import_graph_has_no_cycle() -> None:
    graph = _import_graph()
    assert "hpo.study.runner" in graph and "hpo.predictors.curves" in graph
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_code_imports_the_installed_names_only() -> None:
    import re

    bare = re.compile(r"^\s*(from|import) (models|predictors)\b")
    code = _repository_files((".py",))
    found = [f"{p.relative_to(REPO)}:{i}" for p in code
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if bare.match(line)]
    # hpo.models and hpo.predictors, never the folders' names, which a user's project may share
    assert found == []


def test_every_package_folder_is_installed() -> None:
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    packages = {m for m, p in _module_files().items() if p.name == "__init__.py"}
    assert listed == packages
    assert config["package-dir"] == {"hpo.models": "models", "hpo.predictors": "predictors"}


def test_docs_cite_only_files_the_repository_has() -> None:
    import re

    docs = [p for p in _repository_files((".md",)) if p.relative_to(REPO).parts[0] != "runs"]
    assert REPO / "README.md" in docs and REPO / "docs" / "method.md" in docs
    # a path (with a folder) or a document; bare output names (summary.json) are not citations
    path = re.compile(r"`((?:\.\./|[\w-]+/)[\w./-]*|[\w-]+\.md)`")
    missing = []
    for doc in docs:
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            for cited in path.findall(line):
                if cited.startswith(("../shared/data", "runs/")):
                    continue  # the shared curve data beside a checkout; what hpo run writes
                if not any((base / cited).exists() for base in (REPO, doc.parent)):
                    missing.append(f"{doc.relative_to(REPO)}:{i}: {cited}")
    assert missing == []


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (REPO / "README.md").read_text()
    blocks = readme.split("```bash\n")[1:3]
    install, tests = (b.split("\n```")[0].strip() for b in blocks)
    assert install.endswith("hpo run studies/quickstart.yaml") and '".[all]"' in install
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == tests


def test_benchmarks_use_public_names_only() -> None:
    import ast

    private = []
    for p in (REPO / "benchmarks").glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpo"):
                names = [node.module, *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("hpo")]
            else:
                continue
            if any(part.startswith("_") for n in names for part in n.split(".")):
                private.append(f"{p.name}:{node.lineno}")
    # the scripts use what the product exports, as a user's script would
    assert private == []


def test_every_benchmark_script_makes_a_result() -> None:
    import re

    index = (REPO / "benchmarks" / "results" / "README.md").read_text()
    scripts = sorted(p.name for p in (REPO / "benchmarks").iterdir()
                     if p.suffix in (".py", ".sh") and not p.name.startswith("_"))
    # benchmarks/ holds the scripts behind benchmarks/results/ (its helpers start with _), each
    # named in the results' index beside what it makes
    assert [s for s in scripts if f"benchmarks/{s}" not in index] == []
    # and the index names no script the repository lacks
    named = re.findall(r"benchmarks/[\w/]+\.(?:py|sh)\b", index)
    assert named and [n for n in named if not (REPO / n).exists()] == []
