"""The release artifacts: ``python -m build`` makes an sdist and a wheel, and the wheel
installed into a fresh virtualenv imports every public module.

The wheel is built from the sdist (``python -m build``'s default), so a file missing from
the sdist fails here too. The fresh venv gets the wheel with ``--no-deps``; the runtime
dependencies come from this interpreter's site-packages through a ``.pth`` file (a
``--system-site-packages`` for a virtualenv parent), which keeps the test offline once the
build backend is installed. aioclients itself is only in the venv's own site-packages,
which comes first on ``sys.path``; the test checks that the wheel is what was imported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import aioclients

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_MODULES = [
    "aioclients",
    "aioclients.jetstream",
    "aioclients.nsq",
    "aioclients.liftbridge",
    "aioclients.liftbridge._pb.api_pb2",
    "aioclients.liftbridge._pb.api_pb2_grpc",
    "aioclients.spark",
    "aioclients.testing",
    "aioclients.testing.pytest_plugin",
    "aioclients.telemetry",
    "aioclients.demo",
]

IMPORT_CHECK = """
import importlib, importlib.metadata, importlib.resources, json, sys
names = sys.argv[1:]
files = {name: importlib.import_module(name).__file__ for name in names}
import aioclients
print(json.dumps({
    "files": files,
    "version": aioclients.__version__,
    "metadata_version": importlib.metadata.version("aioclients"),
    "py_typed": importlib.resources.files("aioclients").joinpath("py.typed").is_file(),
    "entry_points": [ep.value for ep in importlib.metadata.entry_points(group="pytest11")],
    "instrumentors": [
        ep.value for ep in importlib.metadata.entry_points(group="opentelemetry_instrumentor")
    ],
}))
"""


def _run(*command: str | Path, cwd: Path | None = None, timeout: float = 300) -> str:
    # Without PYTHONPATH: a checkout on it (with the aioclients.egg-info the sdist build
    # leaves there) would make pip think aioclients is installed already.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_version_lives_in_one_place() -> None:
    """pyproject reads the version from aioclients/_version.py; nothing else states it."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = { attr = "aioclients._version.__version__" }' in pyproject
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?", aioclients.__version__)
    stated = [
        str(path.relative_to(ROOT))
        for path in [*ROOT.glob("aioclients/**/*.py"), ROOT / "pyproject.toml"]
        if path.name != "_version.py"
        and "_pb" not in path.parts
        and re.search(
            rf"""(__version__|version)\s*=\s*["']{re.escape(aioclients.__version__)}""",
            path.read_text(),
        )
    ]
    assert not stated, f"the version is also written in {stated}"


def test_the_changelog_has_a_release_section_for_this_version() -> None:
    """Keep a Changelog: an ``Unreleased`` section, then the releases, newest first; the
    newest is the version the package says it is."""
    headings = re.findall(
        r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", (ROOT / "CHANGELOG.md").read_text(), re.M
    )
    assert headings[0] == ("Unreleased", "")
    assert headings[1][0] == aioclients.__version__, headings[:3]
    assert headings[1][1], "a release section carries its date"


def test_changelog_sections_have_each_heading_once_and_no_repeated_entry() -> None:
    # Merges of branches that each added lines have left a section with two
    # "### Added" headings, entries twice and a stray half of an entry.
    text = (ROOT / "CHANGELOG.md").read_text()
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        version = section.splitlines()[0]
        headings = re.findall(r"^### (.+)$", section, re.M)
        assert len(headings) == len(set(headings)), (version, headings)
        entries: list[str] = []
        for block in re.split(r"^### .+$", section, flags=re.M)[1:]:
            for line in block.strip("\n").splitlines():
                if line.startswith("- "):
                    entries.append(line)
                elif line.startswith("  ") and entries:
                    entries[-1] += "\n" + line
                else:
                    assert not line.strip(), (version, f"a line outside any entry: {line!r}")
        repeated = {e.splitlines()[0] for e in entries if entries.count(e) > 1}
        assert not repeated, (version, repeated)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wheel_installs_into_a_fresh_venv_and_imports(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", dist, ROOT, cwd=ROOT)
    (wheel,) = dist.glob("aioclients-*.whl")
    (sdist,) = dist.glob("aioclients-*.tar.gz")
    version = aioclients.__version__
    assert wheel.name.startswith(f"aioclients-{version}-")
    assert sdist.name == f"aioclients-{version}.tar.gz"

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    for required in (
        "aioclients/py.typed",
        "aioclients/liftbridge/_pb/api_pb2.py",
        "aioclients/liftbridge/_pb/api_pb2.pyi",
        "aioclients/liftbridge/_pb/api_pb2_grpc.py",
    ):
        assert required in names, f"{required} is not in {wheel.name}"
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/")) for n in names)
    with tarfile.open(sdist) as tf:
        sdist_names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert {"README.md", "pyproject.toml", "aioclients/py.typed", "CHANGELOG.md"} <= sdist_names

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel)
    venv_site = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    )
    # The runtime dependencies, from the interpreter running this test.
    (venv_site / "_aioclients_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    report = json.loads(_run(python, "-I", "-c", IMPORT_CHECK, *PUBLIC_MODULES, cwd=tmp_path))
    for name, file in report["files"].items():
        assert Path(file).is_relative_to(venv_site), f"{name} came from {file}, not the wheel"
    assert report["version"] == report["metadata_version"] == version
    assert report["py_typed"]
    assert "aioclients.testing.pytest_plugin" in report["entry_points"]

    # The servers command: a console script and `python -m aioclients.testing serve`.
    for command in (
        [venv / "bin" / "aioclients-servers", "--help"],
        [python, "-m", "aioclients.testing", "serve", "--help"],
    ):
        assert "--nats-port" in _run(*command, cwd=tmp_path)
    extras = _run(
        python,
        "-c",
        "import importlib.metadata as m; print(m.metadata('aioclients').get_all('Provides-Extra'))",
    )
    assert "'servers'" in extras

    assert "aioclients.telemetry:AioClientsInstrumentor" in report["instrumentors"]

    # `opentelemetry-instrument` (from opentelemetry-instrumentation, next to this
    # interpreter) finds the instrumentor through the wheel's entry point.
    auto = Path(sys.executable).parent / "opentelemetry-instrument"
    if auto.exists():
        check = (
            "import aioclients.jetstream as js, aioclients.nsq as nsq; "
            "print(hasattr(js.JetStream.__dict__['publish'], '__wrapped__'), "
            "hasattr(nsq.Reader.__dict__['__anext__'], '__wrapped__'))"
        )
        out = _run(
            auto,
            "--traces_exporter",
            "none",
            "--metrics_exporter",
            "none",
            "--logs_exporter",
            "none",
            python,
            "-c",
            check,
            cwd=tmp_path,
        )
        assert out.split() == ["True", "True"], out
