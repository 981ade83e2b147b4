"""Every ```python block in README.md and docs/ runs, against embedded servers.

Blocks are written for the default ports of a local setup (nats-server on 4222, nsqd on
4150/4151, nsqlookupd on 4160/4161, Liftbridge brokers on 9292/9293). Each block runs in a
subprocess of its own, with those addresses replaced by a fresh nats-server and, when the
block names their ports, fresh NSQ and Liftbridge emulators. A block that defines
``test_*`` functions is a pytest module and runs under pytest (with aioclients' fixtures);
any other block runs as a script and must exit 0.

A marker comment on the line right before a block changes how it runs (the comment is
invisible in the rendered page):

    <!-- docs-test: skip <why> -->   not run (a fragment); keep these rare
    <!-- docs-test: spark -->        a Spark block: marked ``spark``, given more time
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aioclients.testing import LiftbridgeCluster, NatsServer, NsqdEmulator, NsqlookupdEmulator

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SOURCES = [README, *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->\s*$")

NATS_DEFAULT = "nats://127.0.0.1:4222"
NSQ_PORTS = ("127.0.0.1:4150", "127.0.0.1:4151", "127.0.0.1:4160", "127.0.0.1:4161")
LIFTBRIDGE_PORTS = ("127.0.0.1:9292", "127.0.0.1:9293")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    code: str
    marker: str  # "", "skip" or "spark"
    reason: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def collect() -> list[Block]:
    blocks = []
    for path in SOURCES:
        text = path.read_text()
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = _MARKER.search(before)
            kind, reason = (marker[1], marker[2]) if marker else ("", "")
            if kind not in ("", "skip", "spark"):
                raise ValueError(f"{path}:{line}: unknown docs-test marker {kind!r}")
            blocks.append(Block(path, line, match[1], kind, reason))
    return blocks


BLOCKS = collect()


def _param(block: Block) -> Any:
    marks: list[Any] = []
    if block.marker == "skip":
        marks.append(pytest.mark.skip(reason=f"docs-test: skip {block.reason}"))
    elif block.marker == "spark":
        marks.append(pytest.mark.spark)
    return pytest.param(block, id=block.id, marks=marks)


class _Emulators:
    """NSQ and Liftbridge emulators on an event loop in a thread of their own, so that
    they serve the block's subprocess while the test waits for it."""

    def __init__(self, nats_url: str, *, nsq: bool, liftbridge: bool) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._stack: list[Any] = []
        self.addresses: dict[str, str] = {}
        self._call(self._start(nats_url, nsq, liftbridge))

    def _call(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=60)

    async def _enter(self, server: Any) -> Any:
        await server.__aenter__()
        self._stack.append(server)
        return server

    async def _start(self, nats_url: str, nsq: bool, liftbridge: bool) -> None:
        if nsq:
            lookupd = await self._enter(NsqlookupdEmulator())
            nsqd = await self._enter(
                NsqdEmulator(
                    lookupd_tcp_addresses=[lookupd.tcp_address], min_heartbeat_interval=0.1
                )
            )
            self.addresses.update(
                dict(
                    zip(
                        NSQ_PORTS,
                        (
                            nsqd.tcp_address,
                            nsqd.http_address,
                            lookupd.tcp_address,
                            lookupd.http_address,
                        ),
                        strict=True,
                    )
                )
            )
        if liftbridge:
            cluster = await self._enter(LiftbridgeCluster(2, nats_url=nats_url))
            self.addresses.update(dict(zip(LIFTBRIDGE_PORTS, cluster.addresses, strict=True)))

    async def _stop(self) -> None:
        while self._stack:
            await self._stack.pop().__aexit__(None, None, None)

    def close(self) -> None:
        try:
            self._call(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()


@pytest.fixture
def servers(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    block: Block = request.node.callspec.params["block"]
    with NatsServer() as nats:
        emulators = _Emulators(
            nats.url,
            nsq=any(port in block.code for port in NSQ_PORTS),
            liftbridge=any(port in block.code for port in LIFTBRIDGE_PORTS),
        )
        try:
            yield {NATS_DEFAULT: nats.url, **emulators.addresses}
        finally:
            emulators.close()


def test_blocks_were_found() -> None:
    assert len(BLOCKS) >= 20, [b.id for b in BLOCKS]
    skipped = [b.id for b in BLOCKS if b.marker == "skip"]
    # Fragments are the exception: a snippet a reader copies should run as it is.
    assert len(skipped) <= 3, skipped


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_code_block_runs(block: Block, servers: dict[str, str], tmp_path: Path) -> None:
    # One pass, longest default first: replacing one default at a time could match a
    # later default inside an address already put in (127.0.0.1:4150 -> :41613, whose
    # ":4161" is nsqlookupd's default).
    defaults = sorted(servers, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, defaults)))
    code = pattern.sub(lambda m: servers[m.group()], block.code)
    is_pytest = re.search(r"^(async )?def test_", code, re.MULTILINE) is not None
    script = tmp_path / ("test_block.py" if is_pytest else "block.py")
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    for name in [n for n in env if n.startswith("AIOCLIENTS_TEST_")]:
        del env[name]  # the blocks run against the servers started here
    if is_pytest:
        # Under pytest with aioclients' plugin, outside this project's config; its fixtures
        # start servers of their own (an external one would make restart() skip the test).
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=auto",
            "--rootdir",
            str(tmp_path),
            str(script),
        ]
    else:
        command = [sys.executable, str(script)]
    # The quick starts (README, Getting started) are what a newcomer runs first, and
    # often runs again against the same local servers: they must work the second time
    # too (Spark's are left at one run for their time).
    first_pages = (README, ROOT / "docs" / "getting-started.md")
    runs = 2 if block.path in first_pages and not is_pytest and block.marker != "spark" else 1
    for run in range(1, runs + 1):
        result = subprocess.run(
            command,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240 if block.marker == "spark" else 60,
        )
        assert result.returncode == 0, (
            f"{block.id} failed (exit {result.returncode}, run {run}):\n"
            f"{result.stdout}\n{result.stderr}"
        )
        assert "Traceback" not in result.stderr, result.stderr
    if is_pytest:
        assert re.search(r"^\d+ passed in ", result.stdout, re.MULTILINE), (
            f"{block.id}: every test of the block must pass, none skipped:\n{result.stdout}"
        )


#: What the theme shows of a code line at 1280 px before the reader has to scroll.
CODE_WIDTH = 88
_ANY_FENCE = re.compile(r"^\s*(```|~~~)")


def _wide_lines_in(text: str, where: str) -> list[str]:
    wide = []
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if _ANY_FENCE.match(line):
            in_code = not in_code
        elif in_code and len(line) > CODE_WIDTH:
            wide.append(f"{where}:{number} ({len(line)} columns)")
    return wide


def _wide_code_lines(path: Path, root: Path = ROOT) -> list[str]:
    return _wide_lines_in(path.read_text(), str(path.relative_to(root)))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_lines_fit_the_page(path: Path) -> None:
    """No code line in README.md or docs/ is wider than the theme shows: wider ones are
    cut off (or scroll) on the site, and the first screen of a page should read whole."""
    assert _wide_code_lines(path) == []


def test_the_width_check_sees_every_kind_of_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "x" * 100 + "\n```bash\n" + "y" * 89 + "\n```\n"
        "- item\n\n    ```python\n    " + "z" * 85 + "\n    ```\n"
    )
    wide = _wide_code_lines(page, tmp_path)
    assert [w.split()[0] for w in wide] == ["page.md:3", "page.md:8"]


#: The modules the API reference pages render (``::: aioclients.x`` in docs/api/).
API_RENDERED = sorted(
    {
        name
        for page in (ROOT / "docs" / "api").glob("*.md")
        for name in re.findall(r"^::: ([\w.]+)$", page.read_text(), re.MULTILINE)
    }
)


def _docstrings(module_name: str) -> Iterator[tuple[str, str]]:
    """The docstrings the API reference shows for a module: its own, its public names'
    and their public methods' and properties'."""
    module = importlib.import_module(module_name)
    seen: set[int] = set()

    def walk(obj: object, name: str, depth: int) -> Iterator[tuple[str, str]]:
        if id(obj) in seen or depth > 2:
            return
        seen.add(id(obj))
        doc = inspect.getdoc(obj)
        if doc:
            yield name, doc
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                elif isinstance(value, property):
                    value = value.fget
                if inspect.isroutine(value):
                    yield from walk(value, f"{name}.{attr}", depth + 1)

    yield from walk(module, module_name, 0)
    for attr in getattr(module, "__all__", ()):
        yield from walk(getattr(module, attr), f"{module_name}.{attr}", 1)


@pytest.mark.parametrize("module", API_RENDERED)
def test_docstring_code_fits_the_page(module: str) -> None:
    """The API reference renders docstrings' code blocks on the site too."""
    if module == "aioclients.spark":
        pytest.importorskip("pyspark")
    wide = [w for name, doc in _docstrings(module) for w in _wide_lines_in(doc, name)]
    assert wide == []


def test_the_docstring_width_check_sees_the_api_pages() -> None:
    assert {"aioclients", "aioclients.jetstream", "aioclients.liftbridge"} <= set(API_RENDERED)
    names = [name for name, _ in _docstrings("aioclients.liftbridge")]
    assert "aioclients.liftbridge" in names  # the module's own docstring
    assert "aioclients.liftbridge.Client.publish" in names  # a method's


def test_the_readme_is_a_front_page() -> None:
    """README.md is also the package's page: short, with links for the rest."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"{len(lines)} lines: move the details into docs/"


def _extras() -> list[str]:
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = re.findall(r"^([\w-]+) = \[", section, re.M)
    assert {"spark", "servers"} <= set(extras)
    return extras


@pytest.mark.parametrize(
    "page", [README, ROOT / "docs" / "getting-started.md"], ids=lambda p: p.name
)
def test_the_install_section_names_every_extra(page: Path) -> None:
    text = page.read_text()
    install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^pip install aioclients +#", install, re.M)
    for extra in _extras():
        assert f"`{extra}`" in install, f"{page.name}'s Install section does not name {extra!r}"
    assert "Java 17" in install


def test_the_readme_describes_run_and_ci_as_they_are() -> None:
    """What ./run installs and what CI runs, read from the scripts themselves."""
    text = " ".join(README.read_text().split())
    run = (ROOT / "run").read_text()
    (installed,) = re.findall(r'pip install -e "\.\[([\w,]+)\]"', run)
    *first, last = [f"`{extra}`" for extra in installed.split(",")]
    assert f"{', '.join(first)} and {last} extras" in text, installed
    ci = re.findall(r"^(?:exec )?\./run (\w+)", (ROOT / ".ci" / "run").read_text(), re.M)
    *first, last = [f"`./run {command}`" for command in ci]
    assert f"CI (`.ci/run`) runs {', '.join(first)} and {last}." in text, ci
    for command in ("./run demo", "./run test"):
        assert f"{command} " in text


def test_the_readme_links_every_page_and_every_link_works() -> None:
    text = README.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    broken = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert broken == []
    pages = {
        f"docs/{path.relative_to(ROOT / 'docs')}"
        for path in (ROOT / "docs").glob("*.md")
        if path.name not in ("index.md", "changelog.md")
    }
    assert pages - set(links) == set(), "link these pages from the README"


API_MODULES = ["jetstream", "liftbridge", "nsq", "spark", "testing"]


@pytest.mark.parametrize("module", API_MODULES)
def test_api_page_lists_every_public_name(module: str) -> None:
    """docs/api/<module>.md lists its members in reading order; a name added to
    ``__all__`` must be placed there too (or the reference silently leaves it out)."""
    page = (ROOT / "docs" / "api" / f"{module}.md").read_text()
    block = page.split(f"::: aioclients.{module}\n", 1)[1].split(":::", 1)[0]
    listed = re.findall(r"^\s+- (\w+)$", block, re.MULTILINE)
    public = importlib.import_module(f"aioclients.{module}").__all__
    assert len(listed) == len(set(listed)), "a name is listed twice"
    assert set(listed) == set(public), (
        f"add to docs/api/{module}.md: {sorted(set(public) - set(listed))}; "
        f"not public: {sorted(set(listed) - set(public))}"
    )


@pytest.mark.slow
def test_the_scripts_type_check_strictly(tmp_path: Path) -> None:
    """A reader who copies a block into a project checked with ``mypy --strict`` gets no
    error: the package's types (py.typed) fit how the pages use them, e.g. ``publish``
    returns an ``Ack``, not ``Ack | None``, unless asked for ``AckPolicy.NONE``.

    Spark blocks (pyspark's own typing) and pytest modules (untyped fixtures, as pytest
    writes them) are left out."""
    files = []
    for block in BLOCKS:
        if block.marker or re.search(r"^(async )?def test_", block.code, re.MULTILINE):
            continue
        name = re.sub(r"\W", "_", block.id) + ".py"
        (tmp_path / name).write_text(block.code)
        files.append(str(tmp_path / name))
    assert len(files) > 30, "the blocks were not found"
    # What the pages do not show: the markers carried by the errors.
    (tmp_path / "error_attributes.py").write_text(
        "from aioclients.jetstream import KeyDeletedError, ObjectDeletedError\n\n\n"
        "def f(a: KeyDeletedError, b: ObjectDeletedError) -> tuple[int, object]:\n"
        "    return a.entry.revision, b.info.modified if b.info else None\n"
    )
    files.append(str(tmp_path / "error_attributes.py"))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout.replace(str(tmp_path) + os.sep, "") + result.stderr


def _stream_creations(code: str) -> Iterator[tuple[str, str]]:
    """``(name, arguments)`` of every ``js.create_stream("NAME", ...)`` in ``code``."""
    for match in re.finditer(r"\bjs\.create_stream\(", code):  # JetStream only
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            end += 1
        args = re.sub(r"#[^\n]*", "", code[match.end() : end - 1])
        args = re.sub(r"\s+", "", args).rstrip(",")
        name = re.match(r'"(\w+)"', args)
        if name:  # a literal name (testing.md's blocks use unique_name)
            yield name[1], args


def test_blocks_that_name_the_same_stream_create_it_alike() -> None:
    """A reader runs one page's blocks after another's against the same
    ``aioclients-servers``: a stream created again with other options is refused
    (StreamNameInUseError), and one of another name on the same subjects too (the
    subjects overlap). Each block runs on a fresh server here, which would not show it."""
    made: dict[str, tuple[str, str]] = {}
    owners: dict[str, str] = {}
    for block in BLOCKS:
        for name, args in _stream_creations(block.code):
            first = made.setdefault(name, (args, block.id))
            assert first[0] == args, f"{name}: {block.id} creates it unlike {first[1]}"
            for subject in re.findall(r"subjects=\[([^\]]*)\]", args):
                owner = owners.setdefault(subject, name)
                assert owner == name, f"{block.id}: {name} takes {owner}'s subjects {subject}"
    assert len(made) > 10, "the blocks' create_stream calls were not found"
